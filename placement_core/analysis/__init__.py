"""What the dashboard shows, computed: layouts, trace views, bottleneck and archive statistics.

Pure functions over core objects (graphs, results, traces, archives) returning
plain data (numpy arrays, lists of dicts). Nothing here draws or imports
Streamlit; the dashboard turns these into Plotly figures and tables, and the
CLI or a notebook can use them as they are.
"""

from .archive_view import HeatmapData, archive_heatmap, elite_label, top_elites
from .network import network_summary, op_table
from .layout import LayeredLayout, edge_buckets, layered_layout, scale_sizes
from .stats import (compare_placements, channel_stats, correlation_stats, device_stats, kendall_tau,
                    largest_transfers, linear_fit, pearson_r, placement_summary)
from .trace import GanttSegments, critical_path, gantt_rows, gantt_segments, memory_series
from ..base.units import fmt_bytes, fmt_flops, fmt_seconds

__all__ = [
    "GanttSegments", "HeatmapData", "LayeredLayout", "archive_heatmap", "channel_stats", "compare_placements",
    "correlation_stats", "critical_path", "device_stats", "edge_buckets", "elite_label", "fmt_bytes",
    "fmt_flops", "fmt_seconds", "gantt_rows", "gantt_segments", "kendall_tau", "largest_transfers",
    "layered_layout", "linear_fit", "network_summary", "op_table", "memory_series", "pearson_r", "placement_summary", "scale_sizes",
    "top_elites",
]

"""Plotly figures for the pages, one module per subject; numbers come from ``placement_core.analysis``, these
modules only draw.

- :mod:`.style`: colours, the base layout, figures built without validation (shared by every module here)
- :mod:`.topology`: the layered network, the links chart and the route matrix (Network, Devices)
- :mod:`.curves`: best-so-far curves live and stored, several runs overlaid, a policy's reward (Optimize, Runs,
  Learned placers)
- :mod:`.archive`: the archive heatmap, an elite's device load, placements as strips (Archive)
- :mod:`.gantt` and :mod:`.trace_overlay`: the simulated step as a Gantt chart and what the Trace page draws over
  it; :mod:`.memory`: memory in use and utilisation (Trace)
- :mod:`.agreement`: measured against simulated (Benchmark)
- :mod:`.pipeline_gantt` and :mod:`.pipeline_bars`: schedules' timelines, the lecture's animation, memory per
  stage, the bubble's parts and the sweep (Pipeline)
"""

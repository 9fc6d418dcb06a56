"""Benchmark: run placements for real with PyTorch and compare with the simulator."""

from dashboard import benchview, ui

ui.header("Benchmark", "Does the simulator rank placements the way the hardware does? Run placements for real "
          "with PyTorch on the devices of this machine, then compare measured and simulated times per batch "
          "(thesis E5: Pearson r 0.67–0.94).")

with ui.guarded("the benchmark"):
    benchview.render()

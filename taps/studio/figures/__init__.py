"""Plotly figures for TAPS Studio and the bench, built from plain records only (a `Round`, a toy
tree, race, sweep and bench summary rows), all in one style:

    style    fonts, palette, each policy's colour/symbol/pattern (from `taps.policies`), stage
             colours, node and edge styles, colour scale, text helpers
    trees    the drawing blocks of tree figures (edges, nodes, labels, pixel layout)
    round    one round: its whole tree (`round_tree_figure`), each lesson stage (`lesson_figure`:
             `lattice_figure`, `pool_figure`, `selection_figure`, `verdict_figure`), its pool
             ranked two ways, the cost model's size curve, the generated text
    toy      the Learn page's toy tree and its expected-tokens curve
    charts   race, sweep, acceptance against cost, stage shares; the bench's and the latency
             profile's plots
    candidates  one round's block as a grid of the drafter's top-K candidates, every selector's
             round on it and the headroom per position (`taps.studio.candidates`)

Pages use `from taps.studio import figures` and call `figures.round_tree_figure(...)`; images and
HTML files come from `taps.studio.export` (re-exported here: `figure_png`, `figure_svg`,
`figure_html`, `export_title`), whose PNG/SVG renders run under a time limit.
"""

from ...policies import PALETTE
from ..export import ExportError, export_title, figure_html, figure_png, figure_svg
from .candidates import candidates_figure
from .charts import (
    batch_figure,
    budget_figure,
    race_figure,
    reliability_figure,
    stage_share_figure,
    sweep_figure,
    tradeoff_figure,
    verify_latency_figure,
)
from .round import (
    COLOR_MODES,
    bonus_node,
    lattice_figure,
    lesson_figure,
    pool_figure,
    ranking_comparison_figure,
    round_tree_figure,
    run_text_html,
    selection_figure,
    shown_pool_nodes,
    size_curve_figure,
    stage_narration,
    verdict_figure,
)
from .style import DEFAULT_PLOT, PLOT_CONFIG, display_token
from .toy import toy_curve_figure, toy_tree_figure
from .trees import tree_positions

__all__ = [
    "COLOR_MODES", "DEFAULT_PLOT", "PALETTE", "PLOT_CONFIG", "ExportError", "batch_figure", "bonus_node",
    "budget_figure", "candidates_figure",
    "display_token", "export_title", "figure_html", "figure_png", "figure_svg", "lattice_figure", "lesson_figure",
    "pool_figure", "race_figure", "ranking_comparison_figure", "reliability_figure", "round_tree_figure",
    "run_text_html", "selection_figure", "shown_pool_nodes", "size_curve_figure", "stage_narration",
    "stage_share_figure", "sweep_figure", "toy_curve_figure", "toy_tree_figure", "tradeoff_figure", "tree_positions",
    "verdict_figure", "verify_latency_figure",
]

// `wedge plot`: training loss and validation perplexity (language models) or selection
// accuracy (sentence-pair classifiers) of one or several runs, side by side in one
// self-contained SVG (no plotting library).
#pragma once

#include <string>
#include <vector>

namespace wedge::tools {

// Reads <run>/metrics.jsonl of each run; throws std::runtime_error naming a run without
// metrics, or when no run has anything to draw yet. A panel (SheafStateLM's gluing energies,
// the dependency probe's accuracy by distance, ...) is drawn only when some run has points
// for it, two to a row. Writes the SVG atomically.
void write_curves_svg(const std::vector<std::string>& runs, const std::string& out_path);

}  // namespace wedge::tools

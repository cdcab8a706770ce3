// The HTML report: one self-contained page (inline CSS and SVG, no scripts, no external files)
// with the runs' provenance, NIAH heatmaps per policy, accuracy vs budget, accuracy vs context
// length, TPOT vs budget, and the tables of every layout that has data.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "harness/sweep/store.h"

namespace kvb {

std::string render_report_html(const std::vector<StoredRow>& rows,
                               const std::vector<RunRecord>& runs, const std::string& title);
// Writes DIR/index.html (creating DIR) atomically: a failure leaves an existing report as it was.
// Throws InputError naming the folder when it cannot be created or written.
std::filesystem::path write_report(const std::vector<StoredRow>& rows,
                                   const std::vector<RunRecord>& runs, const std::string& title,
                                   const std::filesystem::path& out_dir);

// Orders budget strings for an axis: fractions ascending, then token counts ascending.
std::vector<std::string> ordered_budgets(std::vector<std::string> budgets);

}  // namespace kvb

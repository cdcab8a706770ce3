// Paired comparisons against a reference policy: "does DropKV beat SnapKV at 5%?" answered on the
// same samples, with an interval.
//
// Per (model, benchmark, prompt mode) one table: a row per other policy x budget, a column per
// context length. A cell is the mean of the per-sample differences policy - reference in points,
// over every sample both have (paired by task and sample index: the sweep gives every cell of a
// (task, length, prompt mode) the same samples), the tasks of the benchmark pooled; then its 95%
// interval (Student's t on the paired differences, harness/report/stats.h) and n. The reference
// is taken at the row's budget where it has one, else its budget-less rows (Full). A difference
// whose interval excludes 0 is marked "*". Pairing removes the spread between samples that
// independent per-cell intervals carry, so gaps too small for the per-task tables' Wilson
// intervals to separate can be told apart here.
#pragma once

#include <string>
#include <vector>

#include "harness/report/tables.h"
#include "harness/sweep/store.h"

namespace kvb {

// `reference` is a policy label as the tables print it ("snapkv", "full", "snapkv+art"); InputError
// naming the labels present when no row has it. Empty when nothing pairs with it.
std::vector<TextTable> build_paired_tables(const std::vector<StoredRow>& rows,
                                           const std::string& reference);

}  // namespace kvb

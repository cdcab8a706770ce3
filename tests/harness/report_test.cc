#include "harness/report/report.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "common/errors.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

std::vector<StoredRow> synthetic_rows() {
  std::vector<StoredRow> rows;
  auto add = [&](const std::string& benchmark, const std::string& task, int length,
                 const std::string& policy, const std::string& budget, double depth, double score,
                 double tpot) {
    StoredRow r;
    r.cell.model = "m";
    r.cell.benchmark = benchmark;
    r.cell.task = task;
    r.cell.length = length;
    r.cell.policy = policy;
    r.cell.budget = budget_from_text(budget);
    r.result.depth = depth;
    r.result.score = score;
    r.result.tpot_ms = tpot;
    r.result.tokens_out = 5;
    rows.push_back(r);
  };
  for (const auto& [policy, budget] : std::vector<std::pair<std::string, std::string>>{
           {"full", ""}, {"snapkv", "10%"}, {"snapkv", "25%"}, {"streamingllm", "10%"}}) {
    for (const int length : {1024, 2048})
      for (const double depth : {0.0, 50.0, 100.0})
        add("niah", "niah", length, policy, budget, depth,
            policy == "streamingllm" && depth > 0 ? 0.0 : 1.0, policy == "full" ? 20 : 12);
    add("ruler", "niah_single_1", 1024, policy, budget, -1, budget == "10%" ? 0.5 : 1.0, 15);
    add("ruler", "niah_single_1", 2048, policy, budget, -1, budget == "10%" ? 0.25 : 1.0, 15);
  }
  return rows;
}

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = 0; (pos = text.find(needle, pos)) != std::string::npos; pos += needle.size())
    ++n;
  return n;
}

TEST(Report, HasEveryPlotKindAndNoExternalReferences) {
  const std::string html = render_report_html(synthetic_rows(), {}, "test <report>");
  EXPECT_EQ(count(html, "data-plot=\"niah-heatmap\""), 4);        // one per policy x budget
  EXPECT_EQ(count(html, "data-plot=\"accuracy-vs-budget\""), 2);  // niah, ruler
  EXPECT_EQ(count(html, "data-plot=\"accuracy-vs-length\""), 2);
  EXPECT_EQ(count(html, "data-plot=\"tpot-vs-budget\""), 1);
  EXPECT_EQ(count(html, "<rect class=\"cell\""), 4 * 6);
  EXPECT_NE(html.find("test &lt;report&gt;"), std::string::npos);
  EXPECT_NE(html.find("Against Full on the same samples"), std::string::npos);
  EXPECT_NE(html.find("paired difference against full"), std::string::npos);
  std::vector<StoredRow> without_full = synthetic_rows();
  std::erase_if(without_full, [](const StoredRow& row) { return row.cell.policy == "full"; });
  EXPECT_EQ(render_report_html(without_full, {}, "t").find("Against Full"), std::string::npos);
  // Offline: no scripts, no links, no remote resources.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://www.w3.org/2000/svg"), html.find("http"));
  EXPECT_EQ(count(html, "http"), count(html, "http://www.w3.org/2000/svg"));
  // StreamingLLM misses at depth > 0: red cells; full finds everything: green.
  EXPECT_NE(html.find("fill=\"#F0496E\""), std::string::npos);
  EXPECT_NE(html.find("fill=\"#0CD79F\""), std::string::npos);
  // Budgets on the x axis in increasing order.
  EXPECT_LT(html.find(">10%</text>"), html.find(">25%</text>"));
}

TEST(Report, BudgetOrderAndColours) {
  EXPECT_EQ(ordered_budgets({"512", "25%", "128", "5%"}),
            (std::vector<std::string>{"5%", "25%", "128", "512"}));
}

TEST(Report, UnwritableFolderIsAClearErrorAndKeepsTheOldReport) {
  const fs::path dir = fs::temp_directory_path() / "kvb_report_unwritable";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "file") << "x";
  try {
    write_report(synthetic_rows(), {}, "t", dir / "file" / "out");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("file/out"), std::string::npos) << e.what();
  }
  const fs::path ok = write_report(synthetic_rows(), {}, "first", dir / "out");
  EXPECT_TRUE(fs::exists(ok));
  EXPECT_FALSE(fs::exists(dir / "out" / ".index.html.partial"));
}

// Opens the report in headless Chromium, as a reader would, and checks that the plots are in the
// rendered DOM and visibly drawn (heatmap colours in the screenshot).
TEST(Report, RendersInHeadlessChromium) {
  std::string browser;
  for (const char* candidate : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(candidate)) browser = candidate;
  if (browser.empty()) GTEST_SKIP() << "chromium is not installed (Debian package `chromium`)";
  if (std::system("python3 -c 'import zlib' 2>/dev/null") != 0) GTEST_SKIP() << "no python3";
  const fs::path dir = fs::temp_directory_path() / "kvb_report_chromium";
  fs::remove_all(dir);
  const fs::path page = write_report(synthetic_rows(), {}, "chromium test", dir);
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
      "--user-data-dir=" +
      (dir / "profile").string() + " ";
  const fs::path dom = dir / "dom.html";
  const std::string dump = browser + flags + "--dump-dom 'file://" + page.string() + "' > " +
                           dom.string() + " 2>/dev/null";
  ASSERT_EQ(std::system(dump.c_str()), 0) << dump;
  std::ifstream in(dom);
  const std::string rendered((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(count(rendered, "data-plot=\"niah-heatmap\""), 4);
  EXPECT_EQ(count(rendered, "data-plot=\"accuracy-vs-budget\""), 2);
  EXPECT_EQ(count(rendered, "data-plot=\"accuracy-vs-length\""), 2);
  EXPECT_EQ(count(rendered, "data-plot=\"tpot-vs-budget\""), 1);

  const fs::path png = dir / "shot.png";
  const std::string shot = browser + flags +
                           "--hide-scrollbars --window-size=1200,800 "
                           "--screenshot=" +
                           png.string() + " 'file://" + page.string() + "' >/dev/null 2>&1";
  ASSERT_EQ(std::system(shot.c_str()), 0) << shot;
  ASSERT_TRUE(fs::exists(png));
  // Count pixels of the heatmap's end colours in the screenshot (PNG decoded with zlib only).
  const fs::path script = dir / "count.py";
  std::ofstream(script) << R"py(
import struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
pos, idat, width, height, ctype = 8, b'', 0, 0, 0
while pos < len(data):
    n, kind = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b'IHDR':
        width, height, depth, ctype = struct.unpack('>IIBB', body[:10])
    elif kind == b'IDAT':
        idat += body
    pos += 12 + n
bpp = 4 if ctype == 6 else 3
raw = zlib.decompress(idat)
stride = width * bpp
prev = bytearray(stride)
counts = {'green': 0, 'red': 0}
for y in range(height):
    f = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        r, g, bl = line[x], line[x + 1], line[x + 2]
        if abs(r - 0x0C) < 6 and abs(g - 0xD7) < 6 and abs(bl - 0x9F) < 6: counts['green'] += 1
        if abs(r - 0xF0) < 6 and abs(g - 0x49) < 6 and abs(bl - 0x6E) < 6: counts['red'] += 1
    prev = line
print(counts['green'], counts['red'])
)py";
  const std::string run =
      "python3 " + script.string() + " " + png.string() + " > " + (dir / "counts.txt").string();
  ASSERT_EQ(std::system(run.c_str()), 0);
  std::ifstream counts(dir / "counts.txt");
  long green = 0, red = 0;
  counts >> green >> red;
  // 20 green and 4 red heatmap cells of about 33x33 px each (the legend adds a few more).
  EXPECT_GT(green, 20 * 500);
  EXPECT_GT(red, 4 * 500);
}

}  // namespace
}  // namespace kvb

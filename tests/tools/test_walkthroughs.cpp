// The project's Markdown cannot drift from the code: every relative link must name a file
// that exists, and a link to lines (file#L12 or file#L12-L15) whose text holds a `name`
// must find that name on those lines. The walkthroughs (engine/autograd_walkthrough.md, ...)
// point at the code line by line this way.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kSource = WEDGE_SOURCE_DIR;

std::vector<fs::path> markdown_files() {
  std::vector<fs::path> out;
  for (auto it = fs::recursive_directory_iterator(kSource); it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name.rfind("build", 0) == 0 || name[0] == '.')) {
      it.disable_recursion_pending();  // build trees and hidden folders are not the project's docs
      continue;
    }
    if (it->is_regular_file() && it->path().extension() == ".md") out.push_back(it->path());
  }
  return out;
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

struct Problem {
  std::string where, what;
};

// Every problem with the links of one Markdown file.
std::vector<Problem> check_links(const fs::path& md) {
  std::vector<Problem> problems;
  const std::regex link(R"(\[([^\]]*)\]\(([^)\s]+)\))");
  const std::regex lines_fragment(R"(L(\d+)(?:-L(\d+))?)");
  const std::regex code(R"(`([^`]+)`)");
  const std::vector<std::string> text = read_lines(md);
  bool fenced = false;
  for (std::size_t n = 0; n < text.size(); ++n) {
    if (text[n].rfind("```", 0) == 0) fenced = !fenced;
    if (fenced) continue;
    const std::string where = fs::relative(md, kSource).string() + ":" + std::to_string(n + 1);
    for (std::sregex_iterator m(text[n].begin(), text[n].end(), link), end; m != end; ++m) {
      const std::string label = (*m)[1], target = (*m)[2];
      if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0 || target.rfind("mailto:", 0) == 0 ||
          target[0] == '#')
        continue;
      const std::size_t hash = target.find('#');
      const fs::path file = md.parent_path() / target.substr(0, hash);
      if (!fs::exists(file)) {
        problems.push_back({where, target + ": no such file"});
        continue;
      }
      std::smatch lines;
      const std::string fragment = hash == std::string::npos ? "" : target.substr(hash + 1);
      if (!std::regex_match(fragment, lines, lines_fragment)) continue;
      const std::size_t first = std::stoul(lines[1]), last = lines[2].matched ? std::stoul(lines[2]) : first;
      const std::vector<std::string> body = read_lines(file);
      if (first < 1 || last < first || last > body.size()) {
        problems.push_back({where, target + ": the file has " + std::to_string(body.size()) + " lines"});
        continue;
      }
      std::smatch name;
      if (!std::regex_search(label, name, code)) continue;
      bool found = false;
      for (std::size_t i = first; i <= last && !found; ++i) found = body[i - 1].find(name[1]) != std::string::npos;
      if (!found) problems.push_back({where, target + ": `" + std::string(name[1]) + "` is not on that line any more"});
    }
  }
  return problems;
}

}  // namespace

TEST_CASE("every relative link in the project's Markdown resolves, and every line link still names its code") {
  const std::vector<fs::path> files = markdown_files();
  REQUIRE(files.size() > 10);
  int line_links = 0;
  for (const fs::path& md : files) {
    for (const Problem& p : check_links(md)) FAIL_CHECK(p.where << ": " << p.what);
    for (const std::string& line : read_lines(md)) line_links += line.find("#L") != std::string::npos ? 1 : 0;
  }
  CHECK(line_links > 20);  // the walkthroughs are found and checked
}

TEST_CASE("the link checker itself: a moved line, a missing file and a good link") {
  const fs::path dir = fs::temp_directory_path() / "wedge_link_check";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "code.cpp") << "int alpha = 1;\nint beta = 2;\n";
  std::ofstream(dir / "doc.md") << "[`alpha`](code.cpp#L1) [`beta`](code.cpp#L1-L2) [`gamma`](code.cpp#L2)\n"
                                << "[gone](nothing.cpp) [`beta`](code.cpp#L9) [web](https://example.org)\n"
                                << "```\n[`inside a fence`](nowhere.md)\n```\n";
  const std::vector<Problem> p = check_links(dir / "doc.md");
  REQUIRE(p.size() == 3);
  CHECK(p[0].what.find("`gamma` is not on that line") != std::string::npos);
  CHECK(p[1].what.find("nothing.cpp: no such file") != std::string::npos);
  CHECK(p[2].what.find("the file has 2 lines") != std::string::npos);
  fs::remove_all(dir);
}

#pragma once
// How `ddprun --help` reads: the description (what ddprun does, the Usage line, the first
// commands), then one section per option group in the order they were added, then the
// app's own options (--help, --version) and the footer. Each option shows its short name,
// its first long name and its option_text() (e.g. "N|auto|cpu|gpu"), never a CLI11 type
// name or flag value; a default captured with capture_default_str() ends the description.
// Lines are wrapped at kHelpWidth columns. Hidden options (group "") are left out.

#include <CLI/CLI.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace ddprun {

constexpr std::size_t kHelpWidth = 100;

class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override;
  std::string make_option(const CLI::Option* option, bool is_positional) const override;
};

// The options --help shows, each by the names it shows them under ("-r", "--redirects"),
// in the order shown. An underscore spelling of a long name (torchrun's --nproc_per_node)
// is not among them: the caller lists those once.
std::vector<std::vector<std::string>> shown_options(const CLI::App& app);

// Words of `text` from column `at` on, no line past kHelpWidth, later lines indented by
// `indent`; ends with a newline.
std::string wrap_words(const std::string& text, std::size_t at, std::size_t indent);

}  // namespace ddprun

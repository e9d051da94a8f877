#include "cli/help_formatter.h"

#include <algorithm>
#include <sstream>

namespace ddprun {
namespace {

constexpr std::size_t kDescriptionColumn = 30;

// The sections of the help: each option group, then the app's own options.
std::vector<const CLI::App*> sections(const CLI::App& app) {
  std::vector<const CLI::App*> result = app.get_subcommands(
      [](const CLI::App* sub) { return sub->get_name().empty() && !sub->get_group().empty(); });
  result.push_back(&app);
  return result;
}

std::vector<const CLI::Option*> visible_options(const CLI::App& section) {
  return section.get_options([](const CLI::Option* option) {
    return !option->get_group().empty() && option->nonpositional();
  });
}

std::vector<std::string> shown_names(const CLI::Option& option) {
  std::vector<std::string> names;
  for (const auto& name : option.get_snames()) names.push_back("-" + name);
  const auto& long_names = option.get_lnames();
  for (const auto& name : long_names) {
    std::string dashed = name;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    const bool spelling = dashed != name && std::find(long_names.begin(), long_names.end(),
                                                      dashed) != long_names.end();
    if (!spelling) names.push_back("--" + name);
  }
  return names;
}

std::string join(const std::vector<std::string>& names) {
  std::string joined;
  for (const auto& name : names) joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

}  // namespace

std::string wrap_words(const std::string& text, std::size_t at, std::size_t indent) {
  std::string out;
  std::size_t column = at;
  bool first = true;
  std::istringstream words(text);
  std::string word;
  while (words >> word) {
    if (!first && column + 1 + word.size() > kHelpWidth) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (!first) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    first = false;
  }
  return out + "\n";
}

std::string HelpFormatter::make_option(const CLI::Option* option, bool /*is_positional*/) const {
  std::string left = "  " + join(shown_names(*option));
  if (!option->get_option_text().empty()) left += " " + option->get_option_text();
  std::string description = option->get_description();
  if (option->get_type_size() != 0 && !option->get_default_str().empty()) {
    description += " (default " + option->get_default_str() + ")";
  }
  if (left.size() + 2 > kDescriptionColumn) {
    left += "\n" + std::string(kDescriptionColumn, ' ');
  } else {
    left.resize(kDescriptionColumn, ' ');
  }
  return left + wrap_words(description, kDescriptionColumn, kDescriptionColumn);
}

std::string HelpFormatter::make_help(const CLI::App* app, std::string /*name*/,
                                     CLI::AppFormatMode /*mode*/) const {
  std::string out = app->get_description();
  for (const CLI::App* section : sections(*app)) {
    const auto options = visible_options(*section);
    if (options.empty()) continue;
    out += "\n" + (section == app ? std::string("Help") : section->get_group()) + ":\n";
    if (section != app && !section->get_description().empty()) {
      out += "  " + wrap_words(section->get_description(), 2, 2);
    }
    for (const CLI::Option* option : options) out += make_option(option, false);
  }
  return out + app->get_footer();
}

std::vector<std::vector<std::string>> shown_options(const CLI::App& app) {
  std::vector<std::vector<std::string>> result;
  for (const CLI::App* section : sections(app)) {
    for (const CLI::Option* option : visible_options(*section)) {
      result.push_back(shown_names(*option));
    }
  }
  return result;
}

}  // namespace ddprun

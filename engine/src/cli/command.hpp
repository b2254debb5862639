// The parts of the `loom` command line that its command files share (main.cpp dispatches;
// serving.cpp and model_tools.cpp hold the commands that only read or write checkpoints):
// a command's options, parsed with Boost.Program_options, and its --help.
#pragma once

#include <boost/program_options.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "base/errors.hpp"

namespace loom::engine::cli {

namespace po = boost::program_options;

struct Command {
  std::string name, synopsis;
  std::string notes;                // shown by --help after the options
  po::options_description options;  // shown by --help
  po::options_description hidden;   // the positional arguments, named in the synopsis
  po::positional_options_description positional;
  po::variables_map vm;
  Command(std::string n, std::string syn)
      : name(std::move(n)), synopsis(std::move(syn)), options("options"), hidden("arguments") {
    options.add_options()("help,h", "show this help");
  }
  // Parses `args`; returns false when --help was printed.
  bool parse(const std::vector<std::string>& args) {
    try {
      po::options_description all;
      all.add(options).add(hidden);
      po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
      po::notify(vm);
    } catch (const po::error& e) {
      throw UsageError("loom " + name + ": " + std::string(e.what()) + " (see loom " + name +
                       " --help)");
    }
    if (vm.count("help")) {
      std::cout << "usage: loom " << name << " " << synopsis << "\n\n" << options << "\n";
      if (!notes.empty()) std::cout << notes << "\n";
      return false;
    }
    return true;
  }
  template <class T>
  T required(const std::string& key, const std::string& what) const {
    if (!vm.count(key))
      throw UsageError("loom " + name + ": missing " + what + " (see loom " + name + " --help)");
    return vm[key].as<T>();
  }
  std::vector<std::string> list(const std::string& key) const {
    return vm.count(key) ? vm[key].as<std::vector<std::string>>() : std::vector<std::string>{};
  }
};

inline void add_set_option(Command& c) {
  c.options.add_options()("set", po::value<std::vector<std::string>>()->composing(),
                          "override a recipe key: section.key=value (repeatable)");
}

// serving.cpp
int cmd_generate(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
// model_tools.cpp
int cmd_checkpoint(const std::vector<std::string>& args);
int cmd_parity(const std::vector<std::string>& args);
int cmd_import_hf(const std::vector<std::string>& args);
int cmd_export_hf(const std::vector<std::string>& args);
int cmd_export_peft(const std::vector<std::string>& args);
// schedule.cpp
int cmd_schedule(const std::vector<std::string>& args);

}  // namespace loom::engine::cli

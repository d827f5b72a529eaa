// Hooks around the engine's own forks (children at init, replacements,
// runners). A process that embeds an interpreter — the Python package — sets
// them so that its state is safe across the fork: `prepare` runs in the
// forking thread before the fork, `parent` after it in the parent, `child`
// first thing in the child. Forks anyone else makes do not run them.
#pragma once

namespace pto {

struct ForkHooks {
  void (*prepare)() = nullptr;
  void (*parent)() = nullptr;
  void (*child)() = nullptr;
};

// Process-wide; set once, before the first Worker forks.
void set_fork_hooks(const ForkHooks& hooks);

}  // namespace pto

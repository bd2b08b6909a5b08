// Where the program's own files are: the repository it was built in, found from the executable's
// path, so that default paths (the built-in dataset, the tokenizer table) work from any working
// directory, and run.json can record the commit the program was built from.
#pragma once
#include <string>

// The folder holding the running executable ("" if /proc/self/exe cannot be read).
std::string executable_folder();

// The repository the executable lives in: its folder or the nearest of its parents (up to three
// levels, for build-san/bin/) that holds the Makefile and base/; "" when there is none.
std::string repository_root();

// A default relative path (file or glob) as the program should open it: unchanged when it exists
// relative to the working directory, otherwise the same path inside repository_root() when it
// exists there, otherwise unchanged (so the error names the path the user knows).
std::string locate_default_path(const std::string& relative);

// True when a path or glob names at least one existing file.
bool matches_something(const std::string& pattern);

// The commit checked out in repository_root() ("unknown" without one), read from .git directly
// rather than by running git.
std::string repository_commit();

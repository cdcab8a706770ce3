// A shell command's standard output and exit status, for the tests that run the built kvbench (or
// a Python reference) as a user does. The command goes to /bin/sh as it is: callers add their own
// redirections (" 2>&1" to read standard error too, " 2>FILE" to read it apart).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace kvb::test {

struct CommandRun {
  int exit_code = -1;  // -1: the shell did not start, or the command died of a signal
  std::string out;
};

inline CommandRun run_command(const std::string& command) {
  CommandRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[65536];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.out.append(buffer, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace kvb::test

// Stopping a run cleanly on SIGINT (Ctrl-C) and SIGTERM (what Slurm and `kill` send before they
// kill a job): the first signal asks the training loop to finish the step it is in, write a
// checkpoint when -o is set, print "stopped at step N; resume with -y 1" and exit with status
// 128 + the signal's number. A second signal ends the process at once, after removing the
// temporary file of any checkpoint half written (base/file_io.h).
//
// With several ranks every rank must stop at the same step: the loop asks stop_requested() once per
// step and combines the ranks' answers there (any rank asked -> all stop), since a launcher may
// signal one rank before the others.
#pragma once
#include <string>

// A stop within a bounded time: the first signal also starts a clock of `stop_timeout_seconds`
// (--stop-timeout; 0: none). Where the loop has not reached the step boundary by then (a rank
// waits on a collective that another rank never joins, a step far longer than a scheduler's grace
// period), the process ends there with one line naming what it was waiting on, its half-written
// files removed, and the newest complete checkpoint stays the one to resume from:
//   error: no step boundary within --stop-timeout 120 s of SIGTERM (waiting on: the other ranks'
//   agreement at the step boundary); exiting without a checkpoint: resume from the newest complete one
//
// Installs the handlers; `announce`: this rank prints the one-line notices (rank 0).
void install_interrupt_handlers(bool announce, int stop_timeout_seconds = 0);

// What the loop waits on now, for that line: a string literal ("a sample"), kept by pointer.
void note_waiting_on(const char* what);
// The loop has reached the step boundary after a stop was asked: the stop's clock ends here (the
// checkpoint is written; a second signal still exits at once).
void stop_boundary_reached();

// Whether a signal has asked this process to stop (the loop calls it once per step).
bool stop_requested();

// The signal that asked (SIGINT, SIGTERM), 0 if none (a rank stopping because another one was
// asked); its name ("SIGINT").
int stop_signal();
// Records that the stop was asked by the output folder's STOP file (train/train_loop.cpp; what
// scripts/supervise.sh writes to stop a run cleanly on every node), for the messages.
void note_stop_file();
const char* stop_signal_name();

// The exit status of a run stopped by a signal: 128 + its number (130 for SIGINT, 143 for SIGTERM),
// as a shell reports a process killed by it (143 on a rank that stopped with the others);
// scripts/supervise.sh restarts on it.
int interrupted_exit_status();

// The end of a run stopped by a signal after step `step` (its checkpoint already written when
// output_dir is set): prints "stopped at step N; resume with -y 1" (when `print`) and returns the
// exit status.
int finish_interrupted_run(int step, const std::string& output_dir, bool print);

// For tests: forgets a signal received (handlers stay installed).
void reset_stop_request();

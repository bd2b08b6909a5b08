// SIGINT / SIGTERM handling (see interrupts.h). The handler only sets a flag and writes fixed
// messages with write(2); everything else happens in the loop, outside the handler.
#include "train/interrupts.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "base/file_io.h"

static volatile sig_atomic_t g_signal = 0;
static volatile sig_atomic_t g_announce = 0;
static bool g_stop_file = false;  // asked by the output folder's STOP file

static void say(const char* text) {
    if (g_announce && write(STDERR_FILENO, text, strlen(text)) < 0) {
        // Nothing to do about a closed stderr inside a signal handler.
    }
}

static volatile sig_atomic_t g_stop_timeout = 0;  // seconds (0: none)
static const char* volatile g_waiting_on = "a training step";
static char g_timeout_text[32] = "0";  // --stop-timeout's value, formatted before any signal

static void on_stop_timeout(int) {
    const int signal_number = g_signal ? g_signal : SIGTERM;
    remove_temporary_files_now();
    say("\nerror: no step boundary within --stop-timeout ");
    say(g_timeout_text);
    say(" s of ");
    say(signal_number == SIGINT ? "SIGINT" : "SIGTERM");
    say(" (waiting on: ");
    say(g_waiting_on);
    say("); exiting without a checkpoint: resume from the newest complete one\n");
    _exit(128 + signal_number);
}

static void on_signal(int signal_number) {
    if (g_signal == 0 && g_stop_timeout > 0) alarm((unsigned)g_stop_timeout);
    if (g_signal != 0) {
        remove_temporary_files_now();
        say("\nsecond signal: exiting now; the last complete checkpoint stays the one to resume "
            "from\n");
        _exit(128 + signal_number);
    }
    g_signal = signal_number;
    say("\nstopping after this step (with -o, after writing a checkpoint); signal again to exit at "
        "once\n");
}

void install_interrupt_handlers(bool announce, int stop_timeout_seconds) {
    g_announce = announce;
    g_stop_timeout = stop_timeout_seconds;
    snprintf(g_timeout_text, sizeof g_timeout_text, "%d", stop_timeout_seconds);
    struct sigaction timeout;
    memset(&timeout, 0, sizeof timeout);
    timeout.sa_handler = on_stop_timeout;
    sigemptyset(&timeout.sa_mask);
    sigaction(SIGALRM, &timeout, nullptr);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // file writes in progress go on rather than fail with EINTR
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
}

void note_waiting_on(const char* what) { g_waiting_on = what; }
void stop_boundary_reached() {
    if (g_signal != 0) alarm(0);
}

bool stop_requested() { return g_signal != 0; }
int stop_signal() { return g_signal; }
void note_stop_file() { g_stop_file = true; }
const char* stop_signal_name() {
    return g_stop_file           ? "the STOP file in the output folder"
           : g_signal == SIGINT  ? "SIGINT"
           : g_signal == SIGTERM ? "SIGTERM"
                                 : "a signal to another rank";
}
// A rank stopped because another one was signalled ends as if it had received SIGTERM.
int interrupted_exit_status() { return 128 + (g_signal ? g_signal : SIGTERM); }
void reset_stop_request() {
    alarm(0);
    g_signal = 0;
}

int finish_interrupted_run(int step, const std::string& output_dir, bool print) {
    if (print) {
        if (output_dir.empty())
            printf("stopped at step %d by %s; nothing was saved (no -o)\n", step,
                   stop_signal_name());
        else
            printf("stopped at step %d; resume with -y 1 (%s; checkpoint %d is in %s)\n", step,
                   stop_signal_name(), step, output_dir.c_str());
        fflush(stdout);
    }
    return interrupted_exit_status();
}

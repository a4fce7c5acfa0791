/* What the command line does on a fatal signal: the library never prints
 * or exits, so the policy lives here.
 *
 * SIGBUS: an input we read through a mapping was truncated or hit an I/O
 * error under us. Without a handler the process dies with "Bus error" and
 * leaves its temporaries; with it, one line names the file, every
 * temporary output is removed, and the exit status is 1 like any other
 * error. SIGINT and SIGTERM remove the temporaries too, then end the
 * process by the same signal (so the shell sees the usual status). */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/fileio.h"

static void say(const char *s) { (void)!write(2, s, strlen(s)); }

static void on_bus(int sig, siginfo_t *si, void *ctx)
{
    (void)sig, (void)ctx;
    const char *path = dsq_mmap_owner(si->si_addr);
    say("dsquant: error: ");
    say(path ? path : "an input file");
    say(": changed while it was being read (truncated, or an I/O error under its mapping: SIGBUS); "
        "unfinished outputs removed\n");
    dsq_remove_temporaries();
    _exit(1);
}

static void on_stop(int sig)
{
    dsq_remove_temporaries();
    signal(sig, SIG_DFL);
    raise(sig);
}

void dsq_cli_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

#include <stdio.h>
#include "cli/commands.h"
int dsq_cmd_info(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "dsquant: error: info: not built yet\n"); return 1; }

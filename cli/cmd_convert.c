#include <stdio.h>
#include "cli/commands.h"
int dsq_cmd_convert(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "dsquant: error: convert: not built yet\n"); return 1; }

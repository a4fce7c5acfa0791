#include "formats/int_artifact.h"

#include <string.h>

static const char *const g_names[] = {"awq", "gptq", "compressed-tensors", "fp8", "modelopt"};

const char *dsq_int_format_name(dsq_int_format f)
{
    return (unsigned)f < sizeof g_names / sizeof g_names[0] ? g_names[f] : "?";
}

int dsq_int_format_parse(const char *name)
{
    for (int i = 0; name && i < (int)(sizeof g_names / sizeof g_names[0]); i++)
        if (!strcmp(g_names[i], name)) return i;
    return -1;
}

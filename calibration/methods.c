/* The method table (calibration/method.h). */
#include <string.h>

#include "calibration/method.h"

static const dsq_method *const g_methods[] = {&dsq_method_rtn, &dsq_method_awq, &dsq_method_gptq,
                                              &dsq_method_smoothquant, &dsq_method_fp8};

#define N_METHODS ((int)(sizeof g_methods / sizeof g_methods[0]))

const dsq_method *dsq_method_at(int i) { return i >= 0 && i < N_METHODS ? g_methods[i] : NULL; }

const dsq_method *dsq_method_find(const char *name)
{
    for (int i = 0; name && i < N_METHODS; i++)
        if (!strcmp(g_methods[i]->name, name)) return g_methods[i];
    return NULL;
}

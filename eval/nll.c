#include "eval/nll.h"

#include <math.h>
#include <stddef.h>

#include "kernels/cpu.h"

double dsq_token_nll(const float *logits, int64_t vocab, int32_t tok)
{
    float mx = logits[0];
    for (int64_t i = 1; i < vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < vocab; i++) sum += expf(logits[i] - mx);
    return -((double)(logits[tok] - mx) - log(sum));
}

void dsq_nll_acc_rows(dsq_nll_acc *a, const float *logits, int64_t vocab, const int32_t *targets, int rows)
{
    double nll = 0, nll2 = 0;
#pragma omp parallel for reduction(+ : nll, nll2) schedule(static) num_threads(dsq_cpu_threads())
    for (int r = 0; r < rows; r++) {
        double v = dsq_token_nll(logits + (size_t)r * (size_t)vocab, vocab, targets[r]);
        nll += v;
        nll2 += v * v;
    }
    a->nll += nll;
    a->nll2 += nll2;
    a->count += rows;
}

void dsq_nll_acc_ppl(const dsq_nll_acc *a, double *ppl, double *ppl_err)
{
    *ppl = *ppl_err = 0;
    if (a->count == 0) return;
    double mean = a->nll / (double)a->count, var = a->nll2 / (double)a->count - mean * mean;
    *ppl = exp(mean);
    *ppl_err = var > 0 && a->count > 1 ? sqrt(var / (double)(a->count - 1)) * *ppl : 0;
}

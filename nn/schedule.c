/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/schedule.c — learning-rate (or epsilon) schedules as a pure function of the step.
 */
#include <math.h>

#include "nn/nn.h"

/* With warm-up W and total S steps: step < W ramps linearly from 0 (step 0) towards
 * start (reached at step W); from W the schedule decays from start at step W to end at
 * step S (the decay spans S - W steps, as in the common "warm-up then decay" recipe),
 * and stays at end afterwards. */
float nn_schedule_value(const nn_schedule *s, long step) {
  if (step < 0) step = 0;
  if (s->warmup > 0 && step < s->warmup)
    return (float)((double)s->start * (double)step / (double)s->warmup);
  if (s->kind == NN_SCHED_CONSTANT) return s->start;
  long span = s->steps - (s->warmup > 0 ? s->warmup : 0);
  long t = step - (s->warmup > 0 ? s->warmup : 0);
  if (span <= 0 || t >= span) return s->end;
  double p = (double)t / (double)span, a = s->start, b = s->end;
  switch (s->kind) {
    case NN_SCHED_LINEAR: return (float)(a + (b - a) * p);
    case NN_SCHED_COSINE:
      return (float)(b + (a - b) * 0.5 * (1.0 + cos(3.14159265358979323846 * p)));
    default: return s->start;
  }
}

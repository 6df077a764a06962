/* SPDX-License-Identifier: Apache-2.0 */
/*
 * learner/publish.h — the layout of the parameters a learner publishes: one entry per
 * trainable tensor of its model (name, shape, offset in the flat buffer), as the actors'
 * parameter pulls carry it. Shared by the Ape-X and the on-policy learner.
 */
#ifndef SHOAL_LEARNER_PUBLISH_H
#define SHOAL_LEARNER_PUBLISH_H

#include "nn/nn.h"
#include "rpc/rpc.h"

/* The trainable tensors of m into *out, a new array (caller frees it with free()) with
 * room for `extra` more entries after them; *n gets the count written. Entry names
 * point into m (they live as long as m). Returns 0 or SHOAL_ENOMEM. No model is too
 * large: every tensor is listed. */
int publish_layout(nn_model *m, int extra, rpc_param_entry **out, int *n, shoal_error *err);

#endif

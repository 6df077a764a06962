/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envs/pyembed.h — the embedded CPython that the Gymnasium backends share (envs/gym.c
 * starts it; envs/atari.c uses it). Internal; include Python.h first.
 */
#ifndef SHOAL_ENVS_PYEMBED_H
#define SHOAL_ENVS_PYEMBED_H

#include "common/shoal.h"

/* Starts Python and loads shoal's bridge module once per process; *out is the module
 * (borrowed, alive for the process). The error names id, which Python and what to do:
 * SHOAL_ENOENT (no Python, no Gymnasium), SHOAL_EINTERNAL. Takes no GIL of its own
 * beyond the start: call it without the GIL held. */
int env__py_bridge(const char *id, PyObject **out, shoal_error *err);

/* The pending Python exception as one line ("ValueError: ..."), cleared. GIL held. */
void env__py_error_line(char *out, size_t cap);

#endif

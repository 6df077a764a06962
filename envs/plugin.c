/* SPDX-License-Identifier: Apache-2.0 */
/*
 * C and C++ env plugins: "plugin:PATH[:NAME]" loads the shared library PATH with
 * dlopen, asks its one entry point (shoal_env_plugin, envs/envs.h) for the kinds it
 * exports, checks the ABI version and registers each kind as env_register does. NAME
 * picks one of them (it may be left out when the plugin has one). A library is loaded
 * once per process (by its real path) and never unloaded: the registry borrows its
 * env_types for the life of the process.
 */
#define _GNU_SOURCE /* memmem, realpath */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "nn/nn.h" /* NN_LAYER_ABI: an env plugin's layers */

#define MAX_PLUGINS 32

typedef struct loaded {
  char path[PATH_MAX]; /* realpath */
  const env_plugin *p;
} loaded;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static loaded plugins[MAX_PLUGINS];
static int nplugins;

/* Splits "plugin:PATH[:NAME]": NAME is what follows the last ':' when PATH before it
 * names a shared library (ends in ".so" or has ".so." in it). */
static int split_id(const char *id, char *path, size_t pcap, char *name, size_t ncap,
                    shoal_error *err) {
  const char *rest = id + strlen("plugin:");
  const char *colon = strrchr(rest, ':');
  size_t plen = strlen(rest);
  name[0] = 0;
  if (colon) {
    size_t cl = (size_t)(colon - rest);
    int lib = (cl >= 3 && strncmp(colon - 3, ".so", 3) == 0) || memmem(rest, cl, ".so.", 4);
    if (lib) {
      plen = cl;
      snprintf(name, ncap, "%s", colon + 1);
    }
  }
  if (plen == 0 || plen >= pcap)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "env id '%s': a plugin id is plugin:PATH.so or plugin:PATH.so:NAME", id);
  memcpy(path, rest, plen);
  path[plen] = 0;
  return 0;
}

/* Checks and registers the plugin's kinds. A kind already registered by this same
 * plugin (a second load through another path spelling) is fine; any other clash is not. */
static int register_all(const char *path, const env_plugin *p, shoal_error *err) {
  if (p->ntypes < 1 || !p->types)
    return shoal_error_set(err, SHOAL_EINVAL, "plugin %s: it exports no env kinds (ntypes = %d)",
                           path, p->ntypes);
  for (int i = 0; i < p->ntypes; i++) {
    const env_type *t = p->types[i];
    if (!t) return shoal_error_set(err, SHOAL_EINVAL, "plugin %s: types[%d] is NULL", path, i);
    const env_type *had = env_find(t->spec.id);
    if (had == t) continue;
    if (had)
      return shoal_error_set(err, SHOAL_EEXIST,
                             "plugin %s: env '%s' clashes with an env of that name already "
                             "registered (a built-in or another plugin's); give it another id",
                             path, t->spec.id);
    shoal_error e = {0};
    int rc = env_register(t, &e);
    if (rc)
      return shoal_error_set(err, rc, "plugin %s: invalid env '%s': %s", path,
                             t->spec.id ? t->spec.id : "(no id)", e.msg);
  }
  return 0;
}

/* Loads path once; the plugin's table in *out. Called with mu held. */
static int load_locked(const char *path, const env_plugin **out, shoal_error *err) {
  char real[PATH_MAX];
  if (!realpath(path, real))
    return shoal_error_set(err, SHOAL_ENOENT,
                           "plugin %s: no such file (a relative path is taken from the working "
                           "folder; give an absolute one)",
                           path);
  for (int i = 0; i < nplugins; i++)
    if (strcmp(plugins[i].path, real) == 0) {
      *out = plugins[i].p;
      return 0;
    }
  if (nplugins == MAX_PLUGINS)
    return shoal_error_set(err, SHOAL_EFULL, "plugin %s: at most %d plugins", path, MAX_PLUGINS);
  void *h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (!h) return shoal_error_set(err, SHOAL_EINVAL, "plugin %s: dlopen: %s", path, dlerror());
  /* the one versioned entry point */
  env_plugin_entry_fn entry;
  *(void **)&entry = dlsym(h, ENV_PLUGIN_ENTRY);
  if (!entry) {
    dlclose(h);
    return shoal_error_set(err, SHOAL_EINVAL,
                           "plugin %s: no entry point '%s' (a plugin defines it with "
                           "ENV_PLUGIN_EXPORT; see envs/envs.h)",
                           path, ENV_PLUGIN_ENTRY);
  }
  const env_plugin *p = entry();
  if (!p || p->abi != ENV_PLUGIN_ABI || p->env_type_size != sizeof(env_type)) {
    unsigned abi = p ? p->abi : 0;
    dlclose(h);
    return shoal_error_set(err, SHOAL_EINVAL,
                           "plugin %s: built for env plugin ABI %u, this shoal has ABI %d; "
                           "rebuild it against this shoal's envs/envs.h",
                           path, abi, ENV_PLUGIN_ABI);
  }
  int rc = register_all(path, p, err);
  if (rc) {
    /* kinds registered before the failing one stay (the registry cannot forget), so
     * the library stays loaded too */
    return rc;
  }
  /* An env plugin may bring layers too (a network for its observations): the layer
   * plugins' entry point, called as nn_layer_plugin_load calls it (docs/custom-layers.md). */
  int (*layers)(int abi, shoal_error *e);
  *(void **)&layers = dlsym(h, "shoal_nn_plugin_init");
  if (layers) {
    shoal_error why = {0};
    if ((rc = layers(NN_LAYER_ABI, &why)))
      return shoal_error_set(err, rc, "plugin %s: its layers: %s", path,
                             why.msg[0] ? why.msg : "shoal_nn_plugin_init failed");
  }
  snprintf(plugins[nplugins].path, sizeof plugins[nplugins].path, "%s", real);
  plugins[nplugins++].p = p;
  *out = p;
  return 0;
}

int env__plugin_find(const char *id, const env_type **out, shoal_error *err) {
  char path[PATH_MAX], name[256];
  int rc = split_id(id, path, sizeof path, name, sizeof name, err);
  if (rc) return rc;
  const env_plugin *p = NULL;
  pthread_mutex_lock(&mu);
  rc = load_locked(path, &p, err);
  pthread_mutex_unlock(&mu);
  if (rc) return rc;
  if (!name[0]) {
    if (p->ntypes == 1) {
      *out = p->types[0];
      return 0;
    }
    char known[300] = "";
    size_t len = 0;
    for (int i = 0; i < p->ntypes && len + 1 < sizeof known; i++) {
      int k =
          snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", p->types[i]->spec.id);
      if (k < 0) break;
      len += (size_t)k;
    }
    return shoal_error_set(err, SHOAL_EINVAL,
                           "plugin %s exports %d envs (%s): name one, plugin:%s:NAME", path,
                           p->ntypes, known, path);
  }
  for (int i = 0; i < p->ntypes; i++)
    if (strcmp(p->types[i]->spec.id, name) == 0) {
      *out = p->types[i];
      return 0;
    }
  return shoal_error_set(err, SHOAL_ENOENT, "plugin %s exports no env '%s'", path, name);
}

int env_plugin_load(const char *path, shoal_error *err) {
  const env_plugin *p = NULL;
  pthread_mutex_lock(&mu);
  int rc = load_locked(path, &p, err);
  pthread_mutex_unlock(&mu);
  return rc;
}

/* The plugin registry: creators by (name, version, namespace), and the libraries loaded. */
#include "plugin/plugin.h"

#include "core/alloc.h"
#include "core/status.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

kiln_status kiln_registry_create(kiln_registry **out) {
    if (out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_registry_create: NULL argument");
    *out = kn_calloc(1, sizeof **out);
    return *out ? KILN_OK : kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
}

static void entry_free(kn_creator_entry *e) {
    kn_free(e->name);
    kn_free(e->version);
    kn_free(e->ns);
    for (int i = 0; i < e->c.n_field_specs; i++)
        kn_free(e->spec_names ? e->spec_names[i] : NULL);
    kn_free(e->spec_names);
    kn_free(e->specs);
}

void kiln_registry_destroy(kiln_registry *r) {
    if (r == NULL)
        return;
    for (int i = 0; i < r->n; i++)
        entry_free(&r->items[i]);
    kn_free(r->items);
    for (int i = 0; i < r->n_libs; i++) {
        if (r->libs[i])
            dlclose(r->libs[i]);
        kn_free(r->lib_paths[i]);
    }
    kn_free(r->libs);
    kn_free(r->lib_paths);
    kn_free(r);
}

static const char *or_empty(const char *s) {
    return s ? s : "";
}

/* Versions compare numerically where they are numbers ("10" > "9"), else as strings. */
static int version_cmp(const char *a, const char *b) {
    char *ea, *eb;
    long x = strtol(a, &ea, 10), y = strtol(b, &eb, 10);
    if (*ea == '\0' && *eb == '\0' && ea != a && eb != b)
        return x < y ? -1 : x > y;
    return strcmp(a, b);
}

const kn_creator_entry *kn_registry_find(const kiln_registry *r, const char *name,
                                         const char *version, const char *ns) {
    const kn_creator_entry *best = NULL;
    if (r == NULL)
        return NULL;
    for (int i = 0; i < r->n; i++) {
        const kn_creator_entry *e = &r->items[i];
        if (strcmp(e->name, name) != 0 || (version && strcmp(e->version, version) != 0) ||
            (ns && strcmp(e->ns, ns) != 0))
            continue;
        if (best == NULL || version_cmp(e->version, best->version) > 0)
            best = e;
    }
    return best;
}

static kiln_status add_creator(kiln_registry *r, const kiln_plugin_creator *c, int lib) {
    if (c == NULL || c->name == NULL || c->name[0] == '\0' || c->create == NULL)
        return kn_error(KILN_ERR_PLUGIN, "a plugin creator needs a name and a create function");
    if (c->struct_size < offsetof(kiln_plugin_creator, user) || c->abi_version < 1)
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin creator '%s' has an invalid table (struct_size %u, abi_version "
                        "%u)",
                        c->name, c->struct_size, c->abi_version);
    if (c->abi_version > KILN_PLUGIN_ABI_VERSION)
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin '%s' was built for plugin ABI version %u, but this kiln "
                        "supports up to version %d: rebuild it against this kiln's "
                        "kiln_plugin.h or upgrade kiln",
                        c->name, c->abi_version, KILN_PLUGIN_ABI_VERSION);
    if (c->n_field_specs < 0 || (c->n_field_specs > 0 && c->field_specs == NULL))
        return kn_error(KILN_ERR_PLUGIN, "plugin '%s': bad field spec list", c->name);
    const char *ver = or_empty(c->version), *ns = or_empty(c->plugin_namespace);
    if (kn_registry_find(r, c->name, ver, ns) != NULL)
        return kn_error(KILN_ERR_PLUGIN,
                        "plugin '%s' version '%s' namespace '%s' is already registered", c->name,
                        ver, ns);
    if (r->n == r->cap) {
        int nc = r->cap ? r->cap * 2 : 8;
        kn_creator_entry *p =
            kn_realloc(r->items, (size_t)r->cap * sizeof *p, (size_t)nc * sizeof *p);
        if (p == NULL)
            return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        r->items = p;
        r->cap = nc;
    }
    kn_creator_entry *e = &r->items[r->n];
    memset(e, 0, sizeof *e);
    e->c = *c;
    e->lib = lib;
    e->name = kn_strdup(c->name);
    e->version = kn_strdup(ver);
    e->ns = kn_strdup(ns);
    e->specs = kn_calloc((size_t)c->n_field_specs + 1, sizeof *e->specs);
    e->spec_names = kn_calloc((size_t)c->n_field_specs + 1, sizeof *e->spec_names);
    bool ok = e->name && e->version && e->ns && e->specs && e->spec_names;
    for (int i = 0; ok && i < c->n_field_specs; i++) {
        e->specs[i] = c->field_specs[i];
        e->spec_names[i] = kn_strdup(or_empty(c->field_specs[i].name));
        e->specs[i].name = e->spec_names[i];
        ok = e->spec_names[i] != NULL;
    }
    if (!ok) {
        entry_free(e);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    e->c.name = e->name;
    e->c.version = e->version;
    e->c.plugin_namespace = e->ns;
    e->c.field_specs = e->specs;
    r->n++;
    return KILN_OK;
}

kiln_status kiln_registry_register(kiln_registry *r, const kiln_plugin_creator *c) {
    if (r == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_registry_register: NULL registry");
    return add_creator(r, c, -1);
}

/* Entry functions register through the host API while a library loads; they get the
 * library's index through this per-thread marker. */
static _Thread_local int loading_lib = -1;

int32_t kn_host_register_creator(kiln_registry *r, const kiln_plugin_creator *c);
int32_t kn_host_register_creator(kiln_registry *r, const kiln_plugin_creator *c) {
    if (r == NULL)
        return -1;
    return add_creator(r, c, loading_lib) == KILN_OK ? 0 : -1;
}

kiln_status kiln_registry_deregister(kiln_registry *r, const char *name, const char *version,
                                     const char *ns) {
    if (r == NULL || name == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_registry_deregister: NULL argument");
    const kn_creator_entry *e = kn_registry_find(r, name, version, ns);
    if (e == NULL)
        return kn_error(KILN_ERR_NOT_FOUND,
                        "no plugin '%s' version '%s' namespace '%s' is "
                        "registered",
                        name, or_empty(version), or_empty(ns));
    int i = (int)(e - r->items);
    entry_free(&r->items[i]);
    memmove(&r->items[i], &r->items[i + 1], (size_t)(r->n - i - 1) * sizeof r->items[0]);
    r->n--;
    return KILN_OK;
}

int kiln_registry_count(const kiln_registry *r) {
    return r ? r->n : 0;
}

kiln_status kiln_registry_get(const kiln_registry *r, int index, const char **name,
                              const char **version, const char **ns) {
    if (r == NULL || index < 0 || index >= r->n)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "plugin index %d out of range", index);
    if (name)
        *name = r->items[index].name;
    if (version)
        *version = r->items[index].version;
    if (ns)
        *ns = r->items[index].ns;
    return KILN_OK;
}

static void drop_library_creators(kiln_registry *r, int lib) {
    int k = 0;
    for (int i = 0; i < r->n; i++) {
        if (r->items[i].lib == lib)
            entry_free(&r->items[i]);
        else
            r->items[k++] = r->items[i];
    }
    r->n = k;
}

kiln_status kiln_registry_load_library(kiln_registry *r, const char *path) {
    if (r == NULL || path == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_registry_load_library: NULL argument");
    for (int i = 0; i < r->n_libs; i++)
        if (strcmp(r->lib_paths[i], path) == 0)
            return KILN_OK;
    struct stat st;
    if (stat(path, &st) != 0)
        return kn_error(KILN_ERR_NOT_FOUND, "plugin library '%s' does not exist", path);
    /* dlopen would block on a FIFO waiting for a writer. */
    if (!S_ISREG(st.st_mode))
        return kn_error(KILN_ERR_PLUGIN, "plugin library '%s' is not a regular file", path);
    /* A bare file name would make dlopen search the system paths: anchor it here. */
    char local[4096];
    snprintf(local, sizeof local, "%s%s", strchr(path, '/') ? "" : "./", path);
    void *h = dlopen(local, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return kn_error(KILN_ERR_PLUGIN, "cannot load plugin library '%s': %s", path, dlerror());
    kiln_plugin_entry_fn entry =
        (kiln_plugin_entry_fn)(uintptr_t)dlsym(h, KILN_PLUGIN_ENTRY_SYMBOL);
    if (entry == NULL) {
        dlclose(h);
        return kn_error(KILN_ERR_PLUGIN,
                        "'%s' is not a kiln plugin library: it does not export "
                        "%s",
                        path, KILN_PLUGIN_ENTRY_SYMBOL);
    }
    void **libs = kn_realloc(r->libs, (size_t)r->n_libs * sizeof *libs,
                             (size_t)(r->n_libs + 1) * sizeof *libs);
    if (libs == NULL) {
        dlclose(h);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    r->libs = libs;
    char **paths = kn_realloc(r->lib_paths, (size_t)r->n_libs * sizeof *paths,
                              (size_t)(r->n_libs + 1) * sizeof *paths);
    if (paths == NULL || (paths[r->n_libs] = kn_strdup(path)) == NULL) {
        if (paths)
            r->lib_paths = paths;
        dlclose(h);
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    r->lib_paths = paths;
    int lib = r->n_libs;
    r->libs[lib] = h;
    r->n_libs++;
    kn_error(KILN_ERR_PLUGIN, "no reason given");
    loading_lib = lib;
    int32_t rc = entry(kiln_host_api_get(), r);
    loading_lib = -1;
    if (rc != 0) {
        /* Forget the library whole (it is the last one), so loading it again tries again and
         * fails again with its reason instead of finding its path and answering OK. */
        drop_library_creators(r, lib);
        dlclose(h);
        r->libs[lib] = NULL;
        r->n_libs--;
        kn_free(r->lib_paths[lib]);
        return kn_error_prefix(KILN_ERR_PLUGIN, "plugin library '%s' failed to register: ", path);
    }
    return KILN_OK;
}

static bool is_so(const char *name) {
    size_t n = strlen(name);
    return n > 3 && strcmp(name + n - 3, ".so") == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static kiln_status load_dir(kiln_registry *r, const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL)
        return kn_error(KILN_ERR_NOT_FOUND, "KILN_PLUGIN_PATH folder '%s' cannot be read", dir);
    char **names = NULL;
    int n = 0, cap = 0;
    kiln_status rc = KILN_OK;
    struct dirent *ent;
    while (rc == KILN_OK && (ent = readdir(d)) != NULL) {
        if (!is_so(ent->d_name))
            continue;
        if (n == cap) {
            int grown = cap ? 2 * cap : 64;
            char **more =
                kn_realloc(names, (size_t)cap * sizeof *names, (size_t)grown * sizeof *names);
            if (more == NULL) {
                rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory listing '%s'", dir);
                break;
            }
            names = more;
            cap = grown;
        }
        if ((names[n] = kn_strdup(ent->d_name)) == NULL)
            rc = kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory listing '%s'", dir);
        else
            n++;
    }
    closedir(d);
    if (n > 0)
        qsort(names, (size_t)n, sizeof names[0], cmp_str);
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (rc == KILN_OK)
            rc = kiln_registry_load_library(r, path);
        kn_free(names[i]);
    }
    kn_free(names);
    return rc;
}

kiln_status kiln_registry_load_env(kiln_registry *r) {
    if (r == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_registry_load_env: NULL registry");
    const char *env = getenv("KILN_PLUGIN_PATH");
    if (env == NULL || env[0] == '\0')
        return KILN_OK;
    char *copy = kn_strdup(env), *save = NULL;
    if (copy == NULL)
        return kn_error(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status rc = KILN_OK;
    for (char *p = strtok_r(copy, ":", &save); p && rc == KILN_OK; p = strtok_r(NULL, ":", &save)) {
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rc = load_dir(r, p);
        else
            rc = kiln_registry_load_library(r, p);
    }
    kn_free(copy);
    if (rc != KILN_OK)
        kn_error_prefix(rc, "KILN_PLUGIN_PATH: ");
    return rc;
}

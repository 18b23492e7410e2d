/* The backend registry: the built-in CPU backend, backends registered by tests, and backend
 * modules (libkiln_NAME.so) loaded on first use of their name. The table is process-wide and
 * append-only, as ggml's backend registry: a backend, once found, stays for the process's
 * life, so engines may keep plain pointers to it. */
#include "backend/backend_module.h"
#include "backend/cpu/cpu.h"
#include "core/alloc.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KN_MAX_BACKENDS 16

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static kn_backend *registered[KN_MAX_BACKENDS];
static int n_registered;

kn_backend *kn_backend_host(void) {
    return kn_cpu_backend();
}

static kn_backend *find_locked(const char *name) {
    if (strcmp(name, KN_BACKEND_HOST) == 0)
        return kn_cpu_backend();
    for (int i = 0; i < n_registered; i++)
        if (strcmp(registered[i]->iface->name, name) == 0)
            return registered[i];
    return NULL;
}

static kiln_status register_locked(kn_backend *b) {
    if (b == NULL || b->iface == NULL || b->iface->name == NULL || b->iface->find_kernel == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "a backend needs a name and find_kernel");
    if (find_locked(b->iface->name) != NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "backend '%s' is already registered",
                        b->iface->name);
    if (n_registered == KN_MAX_BACKENDS)
        return kn_error(KILN_ERR_UNSUPPORTED, "at most %d backends can be registered",
                        KN_MAX_BACKENDS);
    if (b->iface->mem == KN_MEM_DEVICE &&
        (b->iface->buffer_alloc == NULL || b->iface->buffer_free == NULL || b->iface->copy == NULL))
        return kn_error(KILN_ERR_INVALID_ARGUMENT,
                        "backend '%s' has device memory but no buffer_alloc, buffer_free or copy",
                        b->iface->name);
    registered[n_registered++] = b;
    return KILN_OK;
}

kiln_status kn_backend_register(kn_backend *b) {
    pthread_mutex_lock(&reg_lock);
    kiln_status rc = register_locked(b);
    pthread_mutex_unlock(&reg_lock);
    return rc;
}

/* --- modules --- */

static kiln_status host_error(kiln_status code, const char *message) {
    return kn_error(code, "%s", message ? message : "unknown error");
}

static void host_log(kiln_log_level level, const char *message) {
    kn_log(level, "%s", message ? message : "");
}

static const kn_backend_host_api module_host = {
    .struct_size = sizeof(kn_backend_host_api),
    .version = KN_BACKEND_MODULE_VERSION,
    .error = host_error,
    .log = host_log,
    .alloc = kn_malloc,
    .free = kn_free,
    .attr = kn_node_attr,
    .attr_int = kn_attr_int,
    .attr_float = kn_attr_float,
    .attr_ints = kn_attr_ints,
    .host_backend = kn_backend_host,
};

static bool name_is_plain(const char *name) {
    if (name[0] == '\0' || strlen(name) > 32)
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return false;
    return true;
}

static void add_path(char paths[][PATH_MAX], int *n, int max, const char *dir, const char *sub,
                     const char *file) {
    if (*n >= max || strlen(dir) + strlen(sub) + strlen(file) + 2 >= PATH_MAX)
        return;
    char *p = paths[*n];
    p[0] = '\0';
    strcat(p, dir);
    strcat(p, "/");
    strcat(p, sub);
    strcat(p, file);
    for (int i = 0; i < *n; i++)
        if (strcmp(paths[i], p) == 0)
            return; /* the program and the library it links statically share a folder */
    (*n)++;
}

/* Candidate paths for libkiln_NAME.so, most explicit first: $KILN_BACKEND_PATH, the folder
 * of the library or program kiln is linked into, and its ../lib (a build tree or prefix). */
static int module_paths(const char *name, char paths[][PATH_MAX], int max) {
    int n = 0;
    char file[64];
    snprintf(file, sizeof file, "libkiln_%s.so", name);
    const char *env = getenv("KILN_BACKEND_PATH");
    if (env && *env)
        add_path(paths, &n, max, env, "", file);
    Dl_info info;
    char self[PATH_MAX];
    if (dladdr((void *)kn_backend_get, &info) && info.dli_fname && info.dli_fname[0] == '/' &&
        strlen(info.dli_fname) < sizeof self) {
        strcpy(self, info.dli_fname);
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            add_path(paths, &n, max, self, "", file);
            add_path(paths, &n, max, self, "../lib/", file);
        }
    }
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = '\0';
            add_path(paths, &n, max, self, "../lib/", file);
        }
    }
    return n;
}

static kiln_status load_module(const char *name, kn_backend **out) {
    char paths[4][PATH_MAX];
    int n = module_paths(name, paths, 4);
    char tried[1024] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        if (access(paths[i], F_OK) != 0) {
            used += (size_t)snprintf(tried + used, used < sizeof tried ? sizeof tried - used : 0,
                                     "%s%s", used ? ", " : "", paths[i]);
            if (used >= sizeof tried)
                used = sizeof tried - 1;
            continue;
        }
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (h == NULL)
            return kn_error(KILN_ERR_UNSUPPORTED, "backend '%s' is unavailable: %s", name,
                            dlerror());
        kn_backend_entry_fn entry;
        *(void **)&entry = dlsym(h, KN_BACKEND_ENTRY_SYMBOL);
        if (entry == NULL) {
            dlclose(h);
            return kn_error(KILN_ERR_UNSUPPORTED, "backend '%s' is unavailable: %s exports no %s",
                            name, paths[i], KN_BACKEND_ENTRY_SYMBOL);
        }
        kn_backend *b = NULL;
        kiln_status rc = entry(&module_host, KN_BACKEND_MODULE_VERSION, &b);
        if (rc != KILN_OK)
            return kn_error_prefix(rc, "backend '%s' is unavailable: ", name);
        if (b == NULL || b->iface == NULL || strcmp(b->iface->name, name) != 0)
            return kn_error(KILN_ERR_UNSUPPORTED,
                            "backend '%s' is unavailable: %s returned another backend", name,
                            paths[i]);
        KN_TRY(register_locked(b));
        *out = b;
        return KILN_OK; /* the module stays loaded: its backend is registered for good */
    }
    return kn_error(KILN_ERR_NOT_FOUND,
                    "unknown backend '%s': it is not built in and no module libkiln_%s.so was "
                    "found (looked for %s; set KILN_BACKEND_PATH to its folder)",
                    name, name, tried[0] ? tried : "nothing");
}

kiln_status kn_backend_get(const char *name, kn_backend **out) {
    if (name == NULL || out == NULL)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "kn_backend_get: NULL argument");
    *out = NULL;
    pthread_mutex_lock(&reg_lock);
    kn_backend *b = find_locked(name);
    kiln_status rc = KILN_OK;
    if (b == NULL && !name_is_plain(name))
        rc = kn_error(KILN_ERR_NOT_FOUND,
                      "unknown backend '%s' (backend names are lowercase letters, digits and _)",
                      name);
    else if (b == NULL)
        rc = load_module(name, &b);
    pthread_mutex_unlock(&reg_lock);
    *out = b;
    return rc;
}

const char *kn_backend_names(char *buf, size_t size) {
    pthread_mutex_lock(&reg_lock);
    int used = snprintf(buf, size, "%s", KN_BACKEND_HOST);
    for (int i = 0; i < n_registered && used >= 0 && (size_t)used < size; i++)
        used += snprintf(buf + used, size - (size_t)used, ", %s", registered[i]->iface->name);
    pthread_mutex_unlock(&reg_lock);
    return buf;
}

bool kn_backend_supports(kn_backend *b, const kn_node *n, int n_in, const kn_tensor *in, int n_out,
                         const kn_tensor *out, kn_caps *caps) {
    memset(caps, 0, sizeof *caps);
    caps->layouts = KN_LAYOUT_LINEAR_BIT;
    /* string tensors (core/strings.h) are host byte blocks: only the CPU backend reads them */
    if (strcmp(b->iface->name, KN_BACKEND_HOST) != 0) {
        bool strings = false;
        for (int i = 0; i < n_in; i++)
            strings |= in[i].dtype == KILN_DTYPE_STRING;
        for (int i = 0; i < n_out; i++)
            strings |= out[i].dtype == KILN_DTYPE_STRING;
        if (strings) {
            snprintf(caps->reason, sizeof caps->reason,
                     "%s: string tensors run on the CPU backend only", b->iface->name);
            return false;
        }
    }
    if (b->iface->supports != NULL)
        return b->iface->supports(b, n, n_in, in, n_out, out, caps);
    if (b->iface->find_kernel(b, n->domain, n->op_type) != NULL)
        return true;
    snprintf(caps->reason, sizeof caps->reason, "the %s backend has no kernel for %s%s%s",
             b->iface->name, n->domain, n->domain[0] ? "." : "", n->op_type);
    return false;
}

bool kn_backend_has_kernel(const char *name, const char *domain, const char *op) {
    kn_backend *b;
    if (kn_backend_get(name, &b) != KILN_OK)
        return false;
    return b->iface->find_kernel(b, domain, op) != NULL;
}

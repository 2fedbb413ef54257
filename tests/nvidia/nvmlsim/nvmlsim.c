/*
 * nvmlsim: a libnvidia-ml.so.1-compatible library for tests on machines without a GPU.
 *
 * It exports, with NVML's C ABI, the functions that NVIDIA's k8s-device-plugin v0.19.3 (through
 * go-nvml, go-nvlib and go-gpuallocator) and gpupool's node agent (through pynvml) call on a
 * node whose cards are not in MIG mode. Device data comes from the JSON file named by the
 * environment variable GPUPOOL_NVML_DEVICES, read at the first nvmlInit (and again after the
 * last nvmlShutdown). Format (tests/nvidia/nvmlsim.py writes it; docs/nvml.md describes it):
 *
 *   {"driverVersion": "580.95.05", "cudaDriverVersion": 13000,
 *    "devices": [{"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-...", "memoryMiB": 81920,
 *                 "memoryUsedMiB": 0, "utilization": 0, "memoryUtilization": 0, "numaNode": 0,
 *                 "minor": 0, "pciBusId": "00000000:07:00.0", "computeCapability": [8, 0],
 *                 "pciDeviceId": "0x20B210DE", "migCapable": true, "xid": 0,
 *                 "processes": [{"pid": 4242, "usedMemoryMiB": 1024}]}]}
 *
 * ABI rules kept as real NVML keeps them: every call before nvmlInit answers UNINITIALIZED;
 * a foreign handle or NULL output pointer is INVALID_ARGUMENT; a string buffer too short, or a
 * process query whose array is NULL or shorter than the answer, is INSUFFICIENT_SIZE with the
 * needed count written back (pynvml's two-call pattern relies on it); a process query with no
 * processes answers SUCCESS and count 0. MIG is not modelled: a MIG-capable card reports MIG
 * disabled, and every MIG-only call answers NOT_SUPPORTED (tests/fakes/fake_pynvml.py is the
 * MIG stand-in). Written for gpupool's tests; no NVIDIA header or source is used.
 */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_UNKNOWN = 999,
};

#define MIB (1024ULL * 1024ULL)
#define MAX_DEVICES 64
#define MAX_PROCS 64

/* ------------------------------------------------------------------ ABI structs */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t; /* the _v2 and _v3 calls share this layout */

struct sim_device;
typedef struct sim_device *nvmlDevice_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

/* ------------------------------------------------------------------ simulated state */
struct sim_proc {
    unsigned int pid;
    unsigned long long used;
};

struct sim_device {
    unsigned int index, minor;
    char name[96], uuid[96], bus_id[32];
    unsigned long long memory, memory_used;
    unsigned int util, mem_util, cc_major, cc_minor, pci_device_id;
    int numa, mig_capable;
    unsigned long long xid;
    int xid_pending;
    unsigned int nprocs;
    struct sim_proc procs[MAX_PROCS];
};

struct sim_event_set {
    unsigned long long mask[MAX_DEVICES];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int refcount;
static char driver_version[80];
static int cuda_version;
static unsigned int ndevices;
static struct sim_device devices[MAX_DEVICES];

/* ------------------------------------------------------------------ a small JSON reader */
typedef struct {
    const char *s, *path;
    size_t i;
    int failed;
} reader;

static void fail(reader *r, const char *what) {
    if (!r->failed)
        fprintf(stderr, "nvmlsim: %s: offset %zu: %s\n", r->path, r->i, what);
    r->failed = 1;
}

static void ws(reader *r) {
    while (r->s[r->i] && isspace((unsigned char)r->s[r->i]))
        r->i++;
}

static int eat(reader *r, char c) {
    ws(r);
    if (r->s[r->i] == c) {
        r->i++;
        return 1;
    }
    return 0;
}

static void expect(reader *r, char c) {
    if (!eat(r, c)) {
        char msg[32];
        snprintf(msg, sizeof msg, "expected '%c'", c);
        fail(r, msg);
    }
}

/* Reads a string into out (truncating at cap-1); escapes other than \" \\ \/ are refused. */
static void str(reader *r, char *out, size_t cap) {
    size_t n = 0;
    if (!eat(r, '"')) {
        fail(r, "expected a string");
        return;
    }
    while (!r->failed && r->s[r->i] != '"') {
        char c = r->s[r->i++];
        if (c == '\0') {
            fail(r, "unterminated string");
            return;
        }
        if (c == '\\') {
            c = r->s[r->i++];
            if (c != '"' && c != '\\' && c != '/') {
                fail(r, "unsupported escape in string");
                return;
            }
        }
        if (out && n + 1 < cap)
            out[n++] = c;
    }
    r->i++;
    if (out)
        out[n] = '\0';
}

static double num(reader *r) {
    char *end;
    ws(r);
    double v = strtod(r->s + r->i, &end);
    if (end == r->s + r->i)
        fail(r, "expected a number");
    r->i = (size_t)(end - r->s);
    return v;
}

static int boolean(reader *r) {
    ws(r);
    if (!strncmp(r->s + r->i, "true", 4)) {
        r->i += 4;
        return 1;
    }
    if (!strncmp(r->s + r->i, "false", 5)) {
        r->i += 5;
        return 0;
    }
    fail(r, "expected true or false");
    return 0;
}

static void skip_value(reader *r) {
    ws(r);
    char c = r->s[r->i];
    if (c == '"') {
        str(r, NULL, 0);
    } else if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        r->i++;
        if (eat(r, close))
            return;
        do {
            if (c == '{') {
                str(r, NULL, 0);
                expect(r, ':');
            }
            skip_value(r);
        } while (!r->failed && eat(r, ','));
        expect(r, close);
    } else if (c == 't' || c == 'f') {
        boolean(r);
    } else if (!strncmp(r->s + r->i, "null", 4)) {
        r->i += 4;
    } else {
        num(r);
    }
}

/* Iterates over an object's keys: call with *first = 1; returns 0 after the closing brace. */
static int next_key(reader *r, char *key, size_t cap, int *first) {
    if (*first) {
        expect(r, '{');
        *first = 0;
        if (eat(r, '}'))
            return 0;
    } else if (!eat(r, ',')) {
        expect(r, '}');
        return 0;
    }
    str(r, key, cap);
    expect(r, ':');
    return !r->failed;
}

static int next_item(reader *r, int *first) {
    if (*first) {
        expect(r, '[');
        *first = 0;
        return !r->failed && !eat(r, ']');
    }
    if (eat(r, ','))
        return !r->failed;
    expect(r, ']');
    return 0;
}

static void read_process(reader *r, struct sim_device *d) {
    char key[64];
    int first = 1;
    struct sim_proc p = {0, 0};
    while (next_key(r, key, sizeof key, &first)) {
        if (!strcmp(key, "pid"))
            p.pid = (unsigned int)num(r);
        else if (!strcmp(key, "usedMemoryMiB"))
            p.used = (unsigned long long)num(r) * MIB;
        else
            skip_value(r);
    }
    if (d->nprocs >= MAX_PROCS)
        fail(r, "too many processes");
    else
        d->procs[d->nprocs++] = p;
}

static void read_device(reader *r, struct sim_device *d) {
    char key[64];
    int first = 1, item;
    while (next_key(r, key, sizeof key, &first)) {
        if (!strcmp(key, "name"))
            str(r, d->name, sizeof d->name);
        else if (!strcmp(key, "uuid"))
            str(r, d->uuid, sizeof d->uuid);
        else if (!strcmp(key, "pciBusId"))
            str(r, d->bus_id, sizeof d->bus_id);
        else if (!strcmp(key, "pciDeviceId")) {
            char hex[16];
            str(r, hex, sizeof hex);
            d->pci_device_id = (unsigned int)strtoul(hex, NULL, 16);
        }
        else if (!strcmp(key, "memoryMiB"))
            d->memory = (unsigned long long)num(r) * MIB;
        else if (!strcmp(key, "memoryUsedMiB"))
            d->memory_used = (unsigned long long)num(r) * MIB;
        else if (!strcmp(key, "utilization"))
            d->util = (unsigned int)num(r);
        else if (!strcmp(key, "memoryUtilization"))
            d->mem_util = (unsigned int)num(r);
        else if (!strcmp(key, "numaNode"))
            d->numa = (int)num(r);
        else if (!strcmp(key, "minor"))
            d->minor = (unsigned int)num(r);
        else if (!strcmp(key, "migCapable"))
            d->mig_capable = boolean(r);
        else if (!strcmp(key, "xid"))
            d->xid = (unsigned long long)num(r);
        else if (!strcmp(key, "computeCapability")) {
            item = 1;
            int k = 0;
            while (next_item(r, &item)) {
                unsigned int v = (unsigned int)num(r);
                if (k == 0)
                    d->cc_major = v;
                else
                    d->cc_minor = v;
                k++;
            }
        } else if (!strcmp(key, "processes")) {
            item = 1;
            while (next_item(r, &item))
                read_process(r, d);
        } else
            skip_value(r);
    }
    if (!r->failed && (!d->name[0] || !d->uuid[0]))
        fail(r, "a device needs \"name\" and \"uuid\"");
    d->xid_pending = d->xid != 0;
}

static void read_root(reader *r) {
    char key[64];
    int first = 1, item;
    while (next_key(r, key, sizeof key, &first)) {
        if (!strcmp(key, "driverVersion"))
            str(r, driver_version, sizeof driver_version);
        else if (!strcmp(key, "cudaDriverVersion"))
            cuda_version = (int)num(r);
        else if (!strcmp(key, "devices")) {
            item = 1;
            while (next_item(r, &item)) {
                if (ndevices >= MAX_DEVICES) {
                    fail(r, "too many devices");
                    break;
                }
                struct sim_device *d = &devices[ndevices];
                memset(d, 0, sizeof *d);
                d->index = d->minor = ndevices;
                read_device(r, d);
                if (!d->bus_id[0])
                    snprintf(d->bus_id, sizeof d->bus_id, "00000000:%02X:00.0", 0x10 + ndevices);
                ndevices++;
            }
        } else
            skip_value(r);
    }
    ws(r);
    if (!r->failed && r->s[r->i])
        fail(r, "trailing data after the JSON object");
}

static nvmlReturn_t load(void) {
    const char *path = getenv("GPUPOOL_NVML_DEVICES");
    if (!path || !*path) {
        fprintf(stderr, "nvmlsim: GPUPOOL_NVML_DEVICES is not set: no simulated driver\n");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "nvmlsim: %s: cannot open\n", path);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc(1, (size_t)size + 1);
    size_t got = text ? fread(text, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!text || got != (size_t)size) {
        free(text);
        return NVML_ERROR_UNKNOWN;
    }
    ndevices = 0;
    cuda_version = 12080;
    snprintf(driver_version, sizeof driver_version, "%s", "570.133.20");
    reader r = {text, path, 0, 0};
    read_root(&r);
    free(text);
    return r.failed ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

/* ------------------------------------------------------------------ helpers */
static int ready(void) {
    pthread_mutex_lock(&lock);
    int ok = refcount > 0;
    pthread_mutex_unlock(&lock);
    return ok;
}

static int valid(nvmlDevice_t d) {
    return d >= devices && d < devices + ndevices;
}

#define CHECK_DEVICE(d)                                                                    \
    do {                                                                                   \
        if (!ready())                                                                      \
            return NVML_ERROR_UNINITIALIZED;                                               \
        if (!valid(d))                                                                     \
            return NVML_ERROR_INVALID_ARGUMENT;                                            \
    } while (0)

static nvmlReturn_t copy_string(const char *value, char *out, unsigned int length) {
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ init and system */
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (refcount == 0)
        ret = load();
    if (ret == NVML_SUCCESS)
        refcount++;
    pthread_mutex_unlock(&lock);
    return ret;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (refcount == 0)
        ret = NVML_ERROR_UNINITIALIZED;
    else
        refcount--;
    pthread_mutex_unlock(&lock);
    return ret;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    return copy_string(driver_version, version, length);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    char v[96];
    snprintf(v, sizeof v, "%d.%s", cuda_version / 1000, driver_version);
    return copy_string(v, version, length);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    return nvmlSystemGetCudaDriverVersion(version);
}

/* ------------------------------------------------------------------ device lookup */
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = ndevices;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= ndevices)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < ndevices; i++) {
        if (!strcmp(devices[i].uuid, uuid)) {
            *device = &devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!bus_id || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < ndevices; i++) {
        if (!strcasecmp(devices[i].bus_id, bus_id)) {
            *device = &devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* ------------------------------------------------------------------ device identity */
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length) {
    CHECK_DEVICE(d);
    return copy_string(d->name, name, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length) {
    CHECK_DEVICE(d);
    return copy_string(d->uuid, uuid, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *index) {
    CHECK_DEVICE(d);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = d->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minor) {
    CHECK_DEVICE(d);
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minor = d->minor;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    CHECK_DEVICE(d);
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = (int)d->cc_major;
    *minor = (int)d->cc_minor;
    return NVML_SUCCESS;
}

static void fill_pci(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", d->bus_id);
    /* the legacy id drops the upper half of the 8-digit domain */
    const char *tail = strlen(d->bus_id) > 4 ? d->bus_id + 4 : d->bus_id;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%.15s", tail);
    sscanf(d->bus_id, "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = d->pci_device_id ? d->pci_device_id : 0x000010DEu; /* vendor 10de */
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    CHECK_DEVICE(d);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(d, pci);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetPciInfo_v3(d, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetPciInfo_v3(d, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node) {
    CHECK_DEVICE(d);
    if (!node)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->numa < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *node = (unsigned int)d->numa;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ memory, utilization */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    CHECK_DEVICE(d);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    m->total = d->memory;
    m->used = d->memory_used;
    m->free = d->memory - d->memory_used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    CHECK_DEVICE(d);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != (unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))
        return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    m->total = d->memory;
    m->reserved = 0;
    m->used = d->memory_used;
    m->free = d->memory - d->memory_used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    CHECK_DEVICE(d);
    if (!u)
        return NVML_ERROR_INVALID_ARGUMENT;
    u->gpu = d->util;
    u->memory = d->mem_util;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ processes */
static nvmlReturn_t size_query(nvmlDevice_t d, unsigned int *count, const void *infos) {
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->nprocs == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (!infos || *count < d->nprocs) {
        *count = d->nprocs;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = d->nprocs;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    CHECK_DEVICE(d);
    nvmlReturn_t ret = size_query(d, count, infos);
    if (ret != NVML_SUCCESS || d->nprocs == 0)
        return ret;
    for (unsigned int i = 0; i < d->nprocs; i++) {
        infos[i].pid = d->procs[i].pid;
        infos[i].usedGpuMemory = d->procs[i].used;
        infos[i].gpuInstanceId = 0xFFFFFFFFu; /* not in MIG mode */
        infos[i].computeInstanceId = 0xFFFFFFFFu;
    }
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v3(d, count, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count,
                                                         nvmlProcessInfo_v1_t *infos) {
    CHECK_DEVICE(d);
    nvmlReturn_t ret = size_query(d, count, infos);
    if (ret != NVML_SUCCESS || d->nprocs == 0)
        return ret;
    for (unsigned int i = 0; i < d->nprocs; i++) {
        infos[i].pid = d->procs[i].pid;
        infos[i].usedGpuMemory = d->procs[i].used;
    }
    return NVML_SUCCESS;
}

/* Graphics and MPS process lists: the simulation runs compute processes only. */
static nvmlReturn_t no_processes(nvmlDevice_t d, unsigned int *count) {
    CHECK_DEVICE(d);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
                                                             void *infos) {
    (void)infos;
    return no_processes(d, count);
}

EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d,
                                                               unsigned int *count, void *infos) {
    (void)infos;
    return no_processes(d, count);
}

/* ------------------------------------------------------------------ MIG: not modelled */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *current,
                                         unsigned int *pending) {
    CHECK_DEVICE(d);
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    *current = 0; /* NVML_DEVICE_MIG_DISABLE */
    *pending = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig) {
    CHECK_DEVICE(d);
    if (!is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *count) {
    CHECK_DEVICE(d);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index,
                                                        nvmlDevice_t *mig) {
    (void)index;
    (void)mig;
    CHECK_DEVICE(d);
    return NVML_ERROR_NOT_FOUND;
}

#define NOT_SUPPORTED_ON_DEVICE(fn)                                                        \
    EXPORT nvmlReturn_t fn(nvmlDevice_t d, void *a, void *b, void *c) {                   \
        (void)a;                                                                           \
        (void)b;                                                                           \
        (void)c;                                                                           \
        CHECK_DEVICE(d);                                                                   \
        return NVML_ERROR_NOT_SUPPORTED;                                                   \
    }

/* Not a MIG device, no fabric, no NVLink, no MIG profiles. */
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetGpuInstanceId)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetComputeInstanceId)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetGpuInstanceProfileInfo)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetGpuInstanceProfileInfoV)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetGpuInstances)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetGpuInstanceById)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetGpuFabricInfo)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetGpuFabricInfoV)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetNvLinkState)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetNvLinkRemotePciInfo_v2)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetAttributes_v2)
NOT_SUPPORTED_ON_DEVICE(nvmlDeviceGetAddressingMode)

/* Two cards on one NUMA node share a host bridge's NUMA domain; otherwise the path crosses
 * the inter-socket link (NVML_TOPOLOGY_NODE = 40, NVML_TOPOLOGY_SYSTEM = 50). */
EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b,
                                                        int *level) {
    CHECK_DEVICE(a);
    if (!valid(b) || !level)
        return NVML_ERROR_INVALID_ARGUMENT;
    *level = a == b ? 0 : (a->numa == b->numa ? 40 : 50);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ events (health checks) */
#define EVENT_XID 0x8ULL
#define EVENT_SUPPORTED (0x1ULL | 0x2ULL | EVENT_XID)

EXPORT nvmlReturn_t nvmlEventSetCreate(struct sim_event_set **set) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof **set);
    return *set ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

EXPORT nvmlReturn_t nvmlEventSetFree(struct sim_event_set *set) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    free(set);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    CHECK_DEVICE(d);
    if (!types)
        return NVML_ERROR_INVALID_ARGUMENT;
    *types = EVENT_SUPPORTED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types,
                                             struct sim_event_set *set) {
    CHECK_DEVICE(d);
    if (!set || (types & ~EVENT_SUPPORTED))
        return NVML_ERROR_INVALID_ARGUMENT;
    set->mask[d->index] |= types;
    return NVML_SUCCESS;
}

/* A device declared with "xid" reports that Xid once, to the first wait that watches it;
 * otherwise the wait sleeps its timeout and answers TIMEOUT, as an idle GPU does. */
EXPORT nvmlReturn_t nvmlEventSetWait_v2(struct sim_event_set *set, nvmlEventData_t *data,
                                        unsigned int timeout_ms) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    if (!set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    for (unsigned int i = 0; i < ndevices; i++) {
        if ((set->mask[i] & EVENT_XID) && devices[i].xid_pending) {
            devices[i].xid_pending = 0;
            memset(data, 0, sizeof *data);
            data->device = &devices[i];
            data->eventType = EVENT_XID;
            data->eventData = devices[i].xid;
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
            pthread_mutex_unlock(&lock);
            return NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return NVML_ERROR_TIMEOUT;
}

EXPORT nvmlReturn_t nvmlEventSetWait(struct sim_event_set *set, nvmlEventData_t *data,
                                     unsigned int timeout_ms) {
    return nvmlEventSetWait_v2(set, data, timeout_ms);
}

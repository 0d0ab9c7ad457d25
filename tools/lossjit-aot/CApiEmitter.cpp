//===- CApiEmitter.cpp - <prefix>.h / <prefix>.c generation ---------------===//
//
// The source is mostly a fixed runtime (arch choice, module loading, the
// memref-ABI argument packing, workspace carving) written once below with
// `$p$` standing for "<prefix>_" and `$P$` for "<PREFIX>_", plus generated
// tables: embedded images, per-(op, arch) kernel lists and a function per
// (op, arch) that evaluates every size and grid formula with overflow checks.
// Internal names use "<prefix>_i_" (never "__", reserved in C++).
//
//===----------------------------------------------------------------------===//

#include "tools/lossjit-aot/CApiEmitter.h"

#include "tools/lossjit-aot/FormulaToC.h"
#include "tools/lossjit-aot/PtxSignature.h"

#include "runtime/Version.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace lossjit::aot {

namespace {

std::string upper(std::string s) {
  for (char &c : s)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string sanitize(std::string s) {
  for (char &c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      c = '_';
  return s;
}

/// A C string literal for arbitrary text.
std::string cString(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\%03o", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

/// Text inside a /* */ comment must not close it.
std::string commentSafe(std::string s) {
  for (size_t at = s.find("*/"); at != std::string::npos; at = s.find("*/", at))
    s.replace(at, 2, "* /");
  return s;
}

std::string substitute(std::string text, const std::string &p, const std::string &P) {
  for (size_t at = text.find("$p$"); at != std::string::npos; at = text.find("$p$", at)) {
    text.replace(at, 3, p);
    at += p.size();
  }
  for (size_t at = text.find("$P$"); at != std::string::npos; at = text.find("$P$", at)) {
    text.replace(at, 3, P);
    at += P.size();
  }
  return text;
}

bool parseArch(const std::string &arch, int &major, int &minor, bool &specific) {
  // sm_<digits>[a|f]; the last digit is the minor version.
  if (arch.rfind("sm_", 0) != 0)
    return false;
  std::string digits;
  size_t i = 3;
  while (i < arch.size() && std::isdigit(static_cast<unsigned char>(arch[i])))
    digits += arch[i++];
  if (digits.size() < 2)
    return false;
  std::string suffix = arch.substr(i);
  if (!suffix.empty() && suffix != "a" && suffix != "f")
    return false;
  specific = !suffix.empty();
  major = std::stoi(digits.substr(0, digits.size() - 1));
  minor = digits.back() - '0';
  return true;
}

const std::set<std::string> &reservedNames() {
  static const std::set<std::string> names = {
      // The entry points' fixed arguments.
      "handle", "stream", "workspace", "workspace_bytes", "params", "dims",
      // C and C++ keywords a buffer could plausibly be called.
      "auto", "bool", "break", "case", "catch", "char", "class", "const", "continue",
      "default", "delete", "do", "double", "else", "enum", "explicit", "export",
      "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int",
      "long", "mutable", "namespace", "new", "operator", "private", "protected",
      "public", "register", "restrict", "return", "short", "signed", "sizeof",
      "static", "struct", "switch", "template", "this", "throw", "true", "try",
      "typedef", "typename", "union", "unsigned", "using", "virtual", "void",
      "volatile", "while"};
  return names;
}

std::string shapeText(const std::vector<std::string> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + shape[i];
  return s + "]";
}

/// A kernel image as a C byte array (PTX keeps a terminating NUL: the driver
/// reads it as a C string).
void emitBytes(std::ostringstream &os, const std::string &name, const std::string &bytes,
               bool nulTerminate) {
  os << "static const unsigned char " << name << "[] = {";
  size_t n = bytes.size() + (nulTerminate ? 1 : 0);
  for (size_t i = 0; i < n; ++i) {
    if (i % 24 == 0)
      os << "\n  ";
    unsigned value = i < bytes.size() ? static_cast<unsigned char>(bytes[i]) : 0;
    os << value << (i + 1 < n ? "," : "");
  }
  os << "\n};\n";
}

/// One row of the C arch table: an arch with one kind of image.
struct ArchEntry {
  std::string arch;
  ImageKind kind;
  size_t archIndex; // into each op's `arches`
  int major = 0, minor = 0;
  bool specific = false;
};

struct Limits {
  size_t maxKernels = 1, maxWorkspaces = 1, maxSymbols = 1, maxSlots = 1,
         maxImages = 1, maxParams = 1, maxDims = 1;
};

// The fixed part of the header; $p$ / $P$ are substituted.
const char *kHeaderApi = R"C(
/* Status codes. Every function returns one; none prints or exits. */
typedef enum $p$status {
  $P$SUCCESS = 0,
  $P$ERROR_INVALID_ARGUMENT = 1,   /* NULL handle, negative dim, null buffer, size overflow */
  $P$ERROR_NO_COMPATIBLE_ARCH = 2, /* no embedded image runs on this device */
  $P$ERROR_CUDA = 3,               /* a driver call failed; see $p$last_error() */
  $P$ERROR_OUT_OF_MEMORY = 4,      /* workspace allocation failed */
  $P$ERROR_WORKSPACE_TOO_SMALL = 5 /* caller's workspace is below the required bytes */
} $p$status;

/* Kernels loaded into one CUDA context. Read-only once created: one handle
 * may serve several threads and streams at once. */
typedef struct $p$handle $p$handle;

/* Workspace allocator (optional, see $p$set_allocator). Memory is released
 * right after the last kernel is enqueued, before it ran, so the allocator
 * must be stream-ordered (like cuMemFreeAsync or PyTorch's caching
 * allocator) or synchronize `stream` before reusing it. */
typedef CUresult (*$p$alloc_fn)(void *user, size_t bytes, CUstream stream,
                                CUdeviceptr *out);
typedef void (*$p$free_fn)(void *user, CUdeviceptr ptr, size_t bytes,
                           CUstream stream);

/* A short name for a status ("$P$ERROR_CUDA"). */
const char *$p$status_string($p$status status);

/* The calling thread's message for the last failed call (empty if none):
 * which call, which buffer or dim, the CUDA error, the JIT log. */
const char *$p$last_error(void);

/* Loads the kernels into `context` (NULL: the calling thread's current
 * context) for its device. Picks the best embedded image: a cubin built for
 * the device's major version, else the newest PTX not newer than the device
 * (the driver JIT-compiles it, so newer GPUs work too). */
$p$status $p$create(CUcontext context, $p$handle **handle);

/* Like $p$create with the image chosen by name: "sm_80" (cubin if one was
 * embedded for it, else PTX), "sm_80:ptx" or "sm_80:cubin". NULL = automatic.
 * Fails with $P$ERROR_NO_COMPATIBLE_ARCH if the device cannot run it. */
$p$status $p$create_for_arch(CUcontext context, const char *arch,
                             $p$handle **handle);

/* Unloads the modules (in the handle's context) and frees the handle.
 * NULL is a no-op. Work already enqueued must have finished. */
$p$status $p$destroy($p$handle *handle);

/* Replaces the workspace allocator used when an entry point gets
 * workspace == 0 (NULL alloc restores the default: cuMemAllocAsync /
 * cuMemFreeAsync, or cuMemAlloc + synchronize + cuMemFree where memory pools
 * are unsupported). Not thread-safe against concurrent launches. */
$p$status $p$set_allocator($p$handle *handle, $p$alloc_fn alloc,
                           $p$free_fn release, void *user);

/* The image the handle runs, e.g. "sm_90:ptx". */
const char *$p$handle_arch(const $p$handle *handle);

/* The embedded images, in table order: $p$arch_name(i) for 0 <= i < $p$num_arches(). */
int $p$num_arches(void);
const char *$p$arch_name(int index);

/* Description of the variant (options, tile, versions, IR hash). */
const char *$p$variant(void);
)C";

// The fixed part of the source.
const char *kSourceRuntime = R"C(
/* ------------------------------------------------------------ messages */

#if defined(__cplusplus)
#define $P$I_TLS thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define $P$I_TLS _Thread_local
#elif defined(__GNUC__)
#define $P$I_TLS __thread
#else
#define $P$I_TLS
#endif

static $P$I_TLS char $p$i_message[4096];

static $p$status $p$i_fail($p$status status, const char *format, ...)
{
  va_list args;
  va_start(args, format);
  vsnprintf($p$i_message, sizeof $p$i_message, format, args);
  va_end(args);
  return status;
}

static $p$status $p$i_cuda_fail(CUresult result, const char *call, const char *what)
{
  const char *name = NULL, *text = NULL;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS || !name)
    name = "unknown CUresult";
  if (cuGetErrorString(result, &text) != CUDA_SUCCESS || !text)
    text = "";
  return $p$i_fail(result == CUDA_ERROR_OUT_OF_MEMORY ? $P$ERROR_OUT_OF_MEMORY
                                                      : $P$ERROR_CUDA,
                   "%s: %s failed: %s (%d: %s)", what, call, name, (int)result, text);
}

const char *$p$status_string($p$status status)
{
  switch (status) {
  case $P$SUCCESS: return "$P$SUCCESS";
  case $P$ERROR_INVALID_ARGUMENT: return "$P$ERROR_INVALID_ARGUMENT";
  case $P$ERROR_NO_COMPATIBLE_ARCH: return "$P$ERROR_NO_COMPATIBLE_ARCH";
  case $P$ERROR_CUDA: return "$P$ERROR_CUDA";
  case $P$ERROR_OUT_OF_MEMORY: return "$P$ERROR_OUT_OF_MEMORY";
  case $P$ERROR_WORKSPACE_TOO_SMALL: return "$P$ERROR_WORKSPACE_TOO_SMALL";
  }
  return "unknown $p$status";
}

const char *$p$last_error(void) { return $p$i_message; }

/* ------------------------------------------- checked int64 arithmetic */
/* Formulas evaluate like runtime::Formula: overflow and division by zero
 * set *e instead of invoking undefined behaviour. */

static inline int64_t $p$i_add(int *e, int64_t a, int64_t b)
{
  if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) { *e = 1; return 0; }
  return a + b;
}
static inline int64_t $p$i_sub(int *e, int64_t a, int64_t b)
{
  if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) { *e = 1; return 0; }
  return a - b;
}
static inline int64_t $p$i_mul(int *e, int64_t a, int64_t b)
{
  if (a == 0 || b == 0) return 0;
  if (a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
            : (b > 0 ? a < INT64_MIN / b : b < INT64_MAX / a)) { *e = 1; return 0; }
  return a * b;
}
static inline int64_t $p$i_neg(int *e, int64_t a)
{
  if (a == INT64_MIN) { *e = 1; return 0; }
  return -a;
}
static inline int64_t $p$i_fdiv(int *e, int64_t a, int64_t b)
{
  int64_t q;
  if (b == 0 || (a == INT64_MIN && b == -1)) { *e = 1; return 0; }
  q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}
static inline int64_t $p$i_cdiv(int *e, int64_t a, int64_t b)
{
  int64_t q;
  if (b == 0 || (a == INT64_MIN && b == -1)) { *e = 1; return 0; }
  q = a / b;
  if (a % b != 0 && ((a < 0) == (b < 0))) ++q;
  return q;
}
static inline int64_t $p$i_min(int *e, int64_t a, int64_t b) { (void)e; return a < b ? a : b; }
static inline int64_t $p$i_max(int *e, int64_t a, int64_t b) { (void)e; return a > b ? a : b; }

/* ------------------------------------------------------------- tables */

enum { $P$I_ARG_PARAM = 0, $P$I_ARG_WORKSPACE = 1, $P$I_ARG_SYMBOL = 2 };

typedef struct $p$i_arg {
  unsigned char kind;  /* $P$I_ARG_* */
  unsigned char index; /* param, workspace, or symbol (dims then constants) */
} $p$i_arg;

typedef struct $p$i_kernel {
  const char *name; /* PTX .entry */
  int image;        /* module index within the arch */
  unsigned int block[3];
  unsigned int shared_bytes; /* dynamic */
  int per_chunk;    /* launched once per row chunk (see $p$i_op_arch) */
  int num_args;
  const $p$i_arg *args;
} $p$i_kernel;

typedef struct $p$i_workspace {
  const char *name;
  size_t element_bytes;
} $p$i_workspace;

/* Symbols s[]: dims, constants, derived symbols, then chunk_begin and
 * chunk_end. sizes() computes the derived symbols into s and the element
 * counts of params and workspaces; grids() the 3 grid sizes of each kernel.
 * Both return nonzero on overflow or division by zero. */
typedef int (*$p$i_sizes_fn)(int64_t *s, int64_t *param_elements,
                             int64_t *workspace_elements);
typedef int (*$p$i_grids_fn)(const int64_t *s, int64_t *grids);

typedef struct $p$i_op_arch {
  int num_kernels;
  const $p$i_kernel *kernels;
  int num_workspaces;
  const $p$i_workspace *workspaces;
  int num_constants;
  const int64_t *constants;
  int num_symbols;  /* dims + constants + derived; chunk_begin/_end follow */
  int chunk_symbol; /* rows per chunk, or -1: no per-chunk kernels */
  int chunk_dim;    /* the dim chunks split (N) */
  $p$i_sizes_fn sizes;
  $p$i_grids_fn grids;
} $p$i_op_arch;

typedef struct $p$i_image {
  const unsigned char *data;
  size_t size;
  const char *file;
} $p$i_image;

typedef struct $p$i_arch {
  const char *name; /* "sm_90:ptx" */
  int major, minor;
  int specific;     /* sm_90a-style: same major only */
  int cubin;        /* cubin: same major, minor <= device */
  int num_images;
  const $p$i_image *images;
  $p$i_op_arch ops[$P$I_NUM_OPS];
} $p$i_arch;

typedef struct $p$i_op {
  const char *name;
  int num_params;
  const char *const *param_names;
  int num_dims;
  const char *const *dim_names;
} $p$i_op;
)C";

const char *kSourceEngine = R"C(
/* ------------------------------------------------------------- handle */

struct $p$handle {
  CUcontext context;
  CUdevice device;
  const $p$i_arch *arch;
  int num_modules;
  CUmodule modules[$P$I_MAX_IMAGES];
  CUfunction functions[$P$I_NUM_OPS][$P$I_MAX_KERNELS];
  $p$alloc_fn alloc;
  $p$free_fn release;
  void *user;
  int pools; /* default allocator: 1 cuMemAllocAsync works, 0 unsupported */
};

int $p$num_arches(void) { return $P$I_NUM_ARCHES; }

const char *$p$arch_name(int index)
{
  if (index < 0 || index >= $P$I_NUM_ARCHES) return NULL;
  return $p$i_arches[index].name;
}

const char *$p$handle_arch(const $p$handle *handle)
{
  return handle ? handle->arch->name : NULL;
}

const char *$p$variant(void) { return $p$i_variant; }

static int $p$i_compatible(const $p$i_arch *a, int major, int minor)
{
  if (major < a->major || (major == a->major && minor < a->minor)) return 0;
  if ((a->specific || a->cubin) && major != a->major) return 0;
  return 1;
}

/* Highest arch first; at equal arch, 'a' before plain, cubin before PTX. */
static long $p$i_rank(const $p$i_arch *a)
{
  return ((long)a->major * 100 + a->minor) * 4 + a->specific * 2 + a->cubin;
}

static const $p$i_arch *$p$i_choose(const char *want, int major, int minor)
{
  const $p$i_arch *best = NULL;
  char names[1024];
  size_t used = 0;
  int i;
  names[0] = '\0';
  for (i = 0; i < $P$I_NUM_ARCHES; ++i) {
    const $p$i_arch *a = &$p$i_arches[i];
    int match = 1;
    if (used + strlen(a->name) + 3 < sizeof names)
      used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", a->name);
    if (want) {
      size_t n = strlen(want);
      /* "sm_80" matches "sm_80:ptx" and "sm_80:cubin"; "sm_80:ptx" only itself. */
      match = strcmp(a->name, want) == 0 ||
              (strchr(want, ':') == NULL && strncmp(a->name, want, n) == 0 && a->name[n] == ':');
    }
    if (match && $p$i_compatible(a, major, minor) && (!best || $p$i_rank(a) > $p$i_rank(best)))
      best = a;
  }
  if (!best)
    $p$i_fail($P$ERROR_NO_COMPATIBLE_ARCH,
              "create: no embedded image %s%sruns on this sm_%d%d device (embedded: %s); "
              "rebuild with lossjit-aot --arch including sm_%d%d or older",
              want ? "named " : "", want ? want : "", major, minor, names, major, minor);
  return best;
}

static void $p$i_unload($p$handle *h)
{
  int i;
  for (i = 0; i < h->num_modules; ++i)
    (void)cuModuleUnload(h->modules[i]);
  h->num_modules = 0;
}

$p$status $p$create(CUcontext context, $p$handle **handle)
{
  return $p$create_for_arch(context, NULL, handle);
}

$p$status $p$create_for_arch(CUcontext context, const char *arch, $p$handle **handle)
{
  CUresult r;
  CUdevice device;
  CUcontext popped;
  int major = 0, minor = 0, optin = -1, i, op, k;
  const $p$i_arch *chosen;
  $p$handle *h;
  $p$status status = $P$SUCCESS;

  $p$i_message[0] = '\0';
  if (!handle) return $p$i_fail($P$ERROR_INVALID_ARGUMENT, "create: handle is NULL");
  *handle = NULL;
  if (!context) {
    r = cuCtxGetCurrent(&context);
    if (r != CUDA_SUCCESS) return $p$i_cuda_fail(r, "cuCtxGetCurrent", "create");
    if (!context)
      return $p$i_fail($P$ERROR_INVALID_ARGUMENT,
                       "create: no CUcontext given and none is current on this thread");
  }
  r = cuCtxPushCurrent(context);
  if (r != CUDA_SUCCESS) return $p$i_cuda_fail(r, "cuCtxPushCurrent", "create");
  if ((r = cuCtxGetDevice(&device)) != CUDA_SUCCESS) {
    status = $p$i_cuda_fail(r, "cuCtxGetDevice", "create");
    (void)cuCtxPopCurrent(&popped);
    return status;
  }
  if ((r = cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)) != CUDA_SUCCESS ||
      (r = cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)) != CUDA_SUCCESS) {
    status = $p$i_cuda_fail(r, "cuDeviceGetAttribute(COMPUTE_CAPABILITY)", "create");
    (void)cuCtxPopCurrent(&popped);
    return status;
  }
  chosen = $p$i_choose(arch, major, minor);
  if (!chosen) {
    (void)cuCtxPopCurrent(&popped);
    return $P$ERROR_NO_COMPATIBLE_ARCH;
  }
  h = ($p$handle *)calloc(1, sizeof *h);
  if (!h) {
    (void)cuCtxPopCurrent(&popped);
    return $p$i_fail($P$ERROR_OUT_OF_MEMORY, "create: out of host memory");
  }
  h->context = context;
  h->device = device;
  h->arch = chosen;
  h->pools = 1;

  for (i = 0; i < chosen->num_images && status == $P$SUCCESS; ++i) {
    char log[4096];
    CUjit_option options[2];
    void *values[2];
    log[0] = '\0';
    options[0] = CU_JIT_ERROR_LOG_BUFFER;
    values[0] = log;
    options[1] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
    values[1] = (void *)(uintptr_t)sizeof log;
    r = cuModuleLoadDataEx(&h->modules[i], chosen->images[i].data, 2, options, values);
    if (r != CUDA_SUCCESS) {
      char what[256];
      log[sizeof log - 1] = '\0';
      snprintf(what, sizeof what, "create: loading %s (%s) on sm_%d%d", chosen->images[i].file,
               chosen->name, major, minor);
      status = $p$i_cuda_fail(r, "cuModuleLoadDataEx", what);
      if (log[0]) {
        size_t used = strlen($p$i_message);
        snprintf($p$i_message + used, sizeof $p$i_message - used, "\nJIT log:\n%s", log);
      }
    } else {
      h->num_modules = i + 1;
    }
  }
  for (op = 0; op < $P$I_NUM_OPS && status == $P$SUCCESS; ++op) {
    const $p$i_op_arch *oa = &chosen->ops[op];
    for (k = 0; k < oa->num_kernels && status == $P$SUCCESS; ++k) {
      const $p$i_kernel *kern = &oa->kernels[k];
      r = cuModuleGetFunction(&h->functions[op][k], h->modules[kern->image], kern->name);
      if (r != CUDA_SUCCESS) {
        status = $p$i_cuda_fail(r, "cuModuleGetFunction", kern->name);
        break;
      }
      if (kern->shared_bytes > 48u * 1024u) {
        if (optin < 0 &&
            (r = cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                      device)) != CUDA_SUCCESS) {
          status = $p$i_cuda_fail(r, "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)",
                                  kern->name);
          break;
        }
        if (kern->shared_bytes > (unsigned)optin) {
          status = $p$i_fail($P$ERROR_NO_COMPATIBLE_ARCH,
                             "create: kernel %s needs %u bytes of shared memory, the device allows %d",
                             kern->name, kern->shared_bytes, optin);
          break;
        }
        r = cuFuncSetAttribute(h->functions[op][k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               (int)kern->shared_bytes);
        if (r != CUDA_SUCCESS) {
          status = $p$i_cuda_fail(r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", kern->name);
          break;
        }
      }
    }
  }
  if (status != $P$SUCCESS) {
    $p$i_unload(h);
    free(h);
    (void)cuCtxPopCurrent(&popped);
    return status;
  }
  (void)cuCtxPopCurrent(&popped);
  *handle = h;
  return $P$SUCCESS;
}

$p$status $p$destroy($p$handle *handle)
{
  CUcontext popped;
  CUresult r;
  if (!handle) return $P$SUCCESS;
  r = cuCtxPushCurrent(handle->context);
  if (r == CUDA_SUCCESS) {
    $p$i_unload(handle);
    (void)cuCtxPopCurrent(&popped);
  }
  free(handle);
  if (r != CUDA_SUCCESS) return $p$i_cuda_fail(r, "cuCtxPushCurrent", "destroy");
  return $P$SUCCESS;
}

$p$status $p$set_allocator($p$handle *handle, $p$alloc_fn alloc, $p$free_fn release, void *user)
{
  if (!handle) return $p$i_fail($P$ERROR_INVALID_ARGUMENT, "set_allocator: handle is NULL");
  if (alloc && !release)
    return $p$i_fail($P$ERROR_INVALID_ARGUMENT, "set_allocator: alloc given without release");
  handle->alloc = alloc;
  handle->release = alloc ? release : NULL;
  handle->user = alloc ? user : NULL;
  return $P$SUCCESS;
}

/* ------------------------------------------------------------- launch */

#define $P$I_ALIGN ((size_t)$P$WORKSPACE_ALIGNMENT)

typedef struct $p$i_layout {
  int64_t symbols[$P$I_MAX_SYMBOLS];
  int64_t param_elements[$P$I_MAX_PARAMS];
  int64_t workspace_elements[$P$I_MAX_WORKSPACES];
  size_t workspace_offset[$P$I_MAX_WORKSPACES];
  size_t workspace_size[$P$I_MAX_WORKSPACES];
  size_t workspace_total;
  int64_t rows; /* rows per chunk */
  int64_t grids[$P$I_MAX_KERNELS * 3];
} $p$i_layout;

static void $p$i_dims_text(const $p$i_op *op, const int64_t *dims, char *out, size_t size)
{
  int i;
  size_t used = 0;
  out[0] = '\0';
  for (i = 0; i < op->num_dims && used < size; ++i)
    used += (size_t)snprintf(out + used, size - used, "%s%s=%lld", i ? ", " : "",
                             op->dim_names[i], (long long)dims[i]);
}

/* Grid of kernel k for rows [begin, end) into L->grids, bounds-checked. */
static $p$status $p$i_grids(int op_index, const $p$i_arch *arch, $p$i_layout *L, int k,
                            int64_t begin, int64_t end)
{
  static const int64_t max_grid[3] = {INT64_C(2147483647), 65535, 65535};
  const $p$i_op *op = &$p$i_ops[op_index];
  const $p$i_op_arch *oa = &arch->ops[op_index];
  char text[256];
  int d;
  L->symbols[oa->num_symbols] = begin;
  L->symbols[oa->num_symbols + 1] = end;
  if (oa->grids(L->symbols, L->grids)) {
    $p$i_dims_text(op, L->symbols, text, sizeof text);
    return $p$i_fail($P$ERROR_INVALID_ARGUMENT, "%s: a grid size overflows int64 for %s",
                     op->name, text);
  }
  for (d = 0; d < 3; ++d) {
    int64_t g = L->grids[k * 3 + d];
    if (g < 0 || g > max_grid[d]) {
      $p$i_dims_text(op, L->symbols, text, sizeof text);
      return $p$i_fail($P$ERROR_INVALID_ARGUMENT,
                       "%s: kernel %s grid[%d] = %lld for %s (rows %lld..%lld): expected 0..%lld",
                       op->name, oa->kernels[k].name, d, (long long)g, text, (long long)begin,
                       (long long)end, (long long)max_grid[d]);
    }
  }
  return $P$SUCCESS;
}

/* Sizes, grids and the workspace layout of `op` on `arch` for `dims`. */
static $p$status $p$i_plan(int op_index, const $p$i_arch *arch, const int64_t *dims,
                           $p$i_layout *L)
{
  const $p$i_op *op = &$p$i_ops[op_index];
  const $p$i_op_arch *oa = &arch->ops[op_index];
  char text[256];
  int i, k;
  $p$status status;

  for (i = 0; i < op->num_dims; ++i) {
    if (dims[i] < 0)
      return $p$i_fail($P$ERROR_INVALID_ARGUMENT, "%s: dim %s = %lld: expected a non-negative integer",
                       op->name, op->dim_names[i], (long long)dims[i]);
    L->symbols[i] = dims[i];
  }
  for (i = 0; i < oa->num_constants; ++i) L->symbols[op->num_dims + i] = oa->constants[i];
  L->symbols[oa->num_symbols] = 0;
  L->symbols[oa->num_symbols + 1] = dims[oa->chunk_dim];
  if (oa->sizes(L->symbols, L->param_elements, L->workspace_elements)) {
    $p$i_dims_text(op, dims, text, sizeof text);
    return $p$i_fail($P$ERROR_INVALID_ARGUMENT,
                     "%s: a buffer size overflows int64 for %s", op->name, text);
  }
  L->rows = L->symbols[oa->chunk_dim];
  if (oa->chunk_symbol >= 0) {
    L->rows = L->symbols[oa->chunk_symbol];
    if (L->rows < 1) L->rows = 1;
  }
  L->workspace_total = 0;
  for (i = 0; i < oa->num_workspaces; ++i) {
    uint64_t count = (uint64_t)L->workspace_elements[i];
    size_t bytes, offset;
    if (L->workspace_elements[i] < 0 ||
        count > (uint64_t)SIZE_MAX / oa->workspaces[i].element_bytes) {
      $p$i_dims_text(op, dims, text, sizeof text);
      return $p$i_fail($P$ERROR_INVALID_ARGUMENT, "%s: workspace %s has %lld elements for %s",
                       op->name, oa->workspaces[i].name, (long long)L->workspace_elements[i], text);
    }
    bytes = (size_t)count * oa->workspaces[i].element_bytes;
    offset = (L->workspace_total + $P$I_ALIGN - 1) / $P$I_ALIGN * $P$I_ALIGN;
    if (offset < L->workspace_total || bytes > SIZE_MAX - offset) {
      $p$i_dims_text(op, dims, text, sizeof text);
      return $p$i_fail($P$ERROR_INVALID_ARGUMENT, "%s: workspace size overflows for %s", op->name, text);
    }
    L->workspace_offset[i] = offset;
    L->workspace_size[i] = bytes;
    if (bytes) L->workspace_total = offset + bytes;
  }
  /* Check every grid now (per-chunk kernels at their first chunk) so
   * that bad dims fail before anything is enqueued. */
  for (k = 0; k < oa->num_kernels; ++k) {
    int64_t n = L->symbols[oa->chunk_dim];
    status = $p$i_grids(op_index, arch, L, k, 0, oa->kernels[k].per_chunk && L->rows < n ? L->rows : n);
    if (status != $P$SUCCESS) return status;
  }
  return $P$SUCCESS;
}

/* The largest workspace any embedded image needs for `op`; (size_t)-1 for
 * invalid dims. */
static size_t $p$i_workspace_bytes(int op, const int64_t *dims)
{
  size_t most = 0;
  int i;
  $p$i_layout L;
  for (i = 0; i < $P$I_NUM_ARCHES; ++i) {
    if ($p$i_plan(op, &$p$i_arches[i], dims, &L) != $P$SUCCESS) return (size_t)-1;
    if (L.workspace_total > most) most = L.workspace_total;
  }
  return most;
}

/* One launch of kernel k over rows [begin, end). */
static $p$status $p$i_launch($p$handle *h, int op_index, CUstream stream, $p$i_layout *L,
                             const CUdeviceptr *params, const CUdeviceptr *ws, int k,
                             int64_t begin, int64_t end)
{
  const $p$i_op *op = &$p$i_ops[op_index];
  const $p$i_kernel *kern = &h->arch->ops[op_index].kernels[k];
  const int64_t *g = &L->grids[k * 3];
  uint64_t slots[$P$I_MAX_SLOTS];
  void *pointers[$P$I_MAX_SLOTS];
  int n = 0, a;
  CUresult r;
  $p$status status = $p$i_grids(op_index, h->arch, L, k, begin, end);
  if (status != $P$SUCCESS) return status;
  if (g[0] == 0 || g[1] == 0 || g[2] == 0) return $P$SUCCESS; /* nothing to do */
  for (a = 0; a < kern->num_args; ++a) {
    const $p$i_arg *arg = &kern->args[a];
    if (arg->kind == $P$I_ARG_SYMBOL) {
      slots[n++] = (uint64_t)L->symbols[arg->index];
    } else {
      /* memref<?xT>: allocated, aligned, offset, size, stride */
      int param = arg->kind == $P$I_ARG_PARAM;
      uint64_t address = param ? (uint64_t)params[arg->index] : (uint64_t)ws[arg->index];
      slots[n++] = address;
      slots[n++] = address;
      slots[n++] = 0;
      slots[n++] = (uint64_t)(param ? L->param_elements[arg->index]
                                    : L->workspace_elements[arg->index]);
      slots[n++] = 1;
    }
  }
  for (a = 0; a < n; ++a) pointers[a] = &slots[a];
  r = cuLaunchKernel(h->functions[op_index][k], (unsigned)g[0], (unsigned)g[1], (unsigned)g[2],
                     kern->block[0], kern->block[1], kern->block[2], kern->shared_bytes,
                     stream, pointers, NULL);
  if (r != CUDA_SUCCESS) {
    char what[256];
    snprintf(what, sizeof what, "%s: kernel %s grid=(%lld,%lld,%lld) block=(%u,%u,%u)",
             op->name, kern->name, (long long)g[0], (long long)g[1], (long long)g[2],
             kern->block[0], kern->block[1], kern->block[2]);
    return $p$i_cuda_fail(r, "cuLaunchKernel", what);
  }
  return $P$SUCCESS;
}

static $p$status $p$i_run($p$handle *h, int op_index, CUstream stream,
                          const CUdeviceptr *params, const int64_t *dims,
                          CUdeviceptr workspace, size_t workspace_bytes)
{
  const $p$i_op *op = &$p$i_ops[op_index];
  const $p$i_op_arch *oa;
  $p$i_layout L;
  $p$status status;
  CUdeviceptr base = 0, ws[$P$I_MAX_WORKSPACES];
  int owned = 0, i, k;
  CUresult r;
  CUcontext popped;

  $p$i_message[0] = '\0';
  if (!h) return $p$i_fail($P$ERROR_INVALID_ARGUMENT, "%s: handle is NULL", op->name);
  oa = &h->arch->ops[op_index];
  status = $p$i_plan(op_index, h->arch, dims, &L);
  if (status != $P$SUCCESS) return status;
  for (i = 0; i < op->num_params; ++i)
    if (params[i] == 0 && L.param_elements[i] > 0)
      return $p$i_fail($P$ERROR_INVALID_ARGUMENT,
                       "%s: %s is a null device pointer but holds %lld elements", op->name,
                       op->param_names[i], (long long)L.param_elements[i]);

  r = cuCtxPushCurrent(h->context);
  if (r != CUDA_SUCCESS) return $p$i_cuda_fail(r, "cuCtxPushCurrent", op->name);
  if (L.workspace_total > 0) {
    if (workspace) {
      if (workspace_bytes < L.workspace_total) {
        (void)cuCtxPopCurrent(&popped);
        return $p$i_fail($P$ERROR_WORKSPACE_TOO_SMALL, "%s: workspace has %llu bytes, needs %llu",
                         op->name, (unsigned long long)workspace_bytes,
                         (unsigned long long)L.workspace_total);
      }
      if (workspace % $P$I_ALIGN) {
        (void)cuCtxPopCurrent(&popped);
        return $p$i_fail($P$ERROR_INVALID_ARGUMENT, "%s: workspace must be %u-byte aligned",
                         op->name, (unsigned)$P$I_ALIGN);
      }
      base = workspace;
    } else {
      if (h->alloc) {
        r = h->alloc(h->user, L.workspace_total, stream, &base);
      } else {
        r = CUDA_ERROR_NOT_SUPPORTED;
        if (h->pools) {
          r = cuMemAllocAsync(&base, L.workspace_total, stream);
          if (r == CUDA_ERROR_NOT_SUPPORTED) h->pools = 0;
        }
        if (!h->pools) r = cuMemAlloc(&base, L.workspace_total);
      }
      if (r != CUDA_SUCCESS || !base) {
        (void)cuCtxPopCurrent(&popped);
        if (r == CUDA_SUCCESS)
          return $p$i_fail($P$ERROR_OUT_OF_MEMORY, "%s: the allocator returned NULL", op->name);
        return $p$i_cuda_fail(r, "workspace allocation", op->name);
      }
      owned = 1;
    }
  }
  for (i = 0; i < oa->num_workspaces; ++i)
    ws[i] = L.workspace_size[i] ? base + (CUdeviceptr)L.workspace_offset[i] : 0;

  /* Kernels in plan order; a run of per-chunk kernels repeats, as a
   * group, for each chunk of rows. */
  for (k = 0; k < oa->num_kernels && status == $P$SUCCESS;) {
    int64_t n = L.symbols[oa->chunk_dim], begin;
    int group_end = k + 1;
    if (!oa->kernels[k].per_chunk) {
      status = $p$i_launch(h, op_index, stream, &L, params, ws, k, 0, n);
      k = group_end;
      continue;
    }
    while (group_end < oa->num_kernels && oa->kernels[group_end].per_chunk) ++group_end;
    for (begin = 0; begin < n && status == $P$SUCCESS;) {
      int64_t end = L.rows < n - begin ? begin + L.rows : n;
      for (i = k; i < group_end && status == $P$SUCCESS; ++i)
        status = $p$i_launch(h, op_index, stream, &L, params, ws, i, begin, end);
      begin = end;
    }
    k = group_end;
  }
  if (owned) {
    if (h->alloc) {
      h->release(h->user, base, L.workspace_total, stream);
    } else if (h->pools) {
      (void)cuMemFreeAsync(base, stream);
    } else {
      (void)cuStreamSynchronize(stream);
      (void)cuMemFree(base);
    }
  }
  (void)cuCtxPopCurrent(&popped);
  return status;
}

static $p$status $p$i_run_v($p$handle *h, int op_index, CUstream stream,
                            const CUdeviceptr *buffers, int num_buffers, const int64_t *dims,
                            int num_dims, CUdeviceptr workspace, size_t workspace_bytes)
{
  const $p$i_op *op = &$p$i_ops[op_index];
  if (num_buffers != op->num_params || num_dims != op->num_dims || (num_buffers && !buffers) ||
      (num_dims && !dims))
    return $p$i_fail($P$ERROR_INVALID_ARGUMENT,
                     "%s_v: expected %d buffers and %d dims, got %d and %d", op->name,
                     op->num_params, op->num_dims, buffers ? num_buffers : 0, dims ? num_dims : 0);
  return $p$i_run(h, op_index, stream, buffers, dims, workspace, workspace_bytes);
}
)C";

class Emitter {
public:
  Emitter(const AotOutput &out) : out(out) {
    p = out.prefix + "_";
    P = upper(out.prefix) + "_";
  }

  runtime::Expected<CApiFiles> run() {
    if (runtime::Error e = collect())
      return e;
    CApiFiles files;
    files.headerName = out.prefix + ".h";
    files.sourceName = out.prefix + ".c";
    files.header = header();
    auto source = this->source();
    if (!source)
      return source.takeError();
    files.source = std::move(*source);
    return files;
  }

private:
  runtime::Error collect() {
    const AotOp &first = out.ops.front();
    for (const AotOp &op : out.ops) {
      if (op.arches.size() != first.arches.size())
        return runtime::makeError("the C API needs every op built for the same arches");
      for (size_t a = 0; a < op.arches.size(); ++a)
        if (op.arches[a].bundle.arch != first.arches[a].bundle.arch)
          return runtime::makeError("the C API needs every op built for the same arches");
    }
    for (size_t a = 0; a < first.arches.size(); ++a) {
      ArchEntry entry;
      entry.arch = first.arches[a].bundle.arch;
      entry.archIndex = a;
      if (!parseArch(entry.arch, entry.major, entry.minor, entry.specific))
        return runtime::makeError("cannot parse arch '" + entry.arch + "'");
      if (out.imageKind == ImageKind::Cubin) {
        entry.kind = ImageKind::Cubin;
        entries.push_back(entry);
      }
      entry.kind = ImageKind::Ptx;
      entries.push_back(entry);
    }
    // Limits and per-(op, arch) module numbering.
    for (const AotOp &op : out.ops) {
      const runtime::KernelBundle &b0 = op.arches.front().bundle;
      limits.maxParams = std::max(limits.maxParams, b0.params.size());
      limits.maxDims = std::max(limits.maxDims, b0.dims.size());
      for (const AotArchBuild &build : op.arches) {
        const runtime::KernelBundle &b = build.bundle;
        limits.maxKernels = std::max(limits.maxKernels, b.kernels.size());
        limits.maxWorkspaces = std::max(limits.maxWorkspaces, b.workspaces.size());
        limits.maxSymbols = std::max(limits.maxSymbols, symbolsOf(build).size());
        for (size_t k = 0; k < b.kernels.size(); ++k)
          limits.maxSlots = std::max(limits.maxSlots, planSlots(b, k).size());
        if (build.usesChunks() && chunkSymbolIndex(build) < 0)
          return runtime::makeError(op.role + " " + b.arch + ": chunk symbol '" +
                                    build.chunkSymbol + "' is not a dim, constant or "
                                    "derived symbol");
        if (b.params.size() > 255 || b.workspaces.size() > 255 ||
            symbolsOf(build).size() > 255)
          return runtime::makeError("too many params, workspaces or symbols for the C tables");
      }
    }
    for (size_t a = 0; a < first.arches.size(); ++a) {
      size_t images = 0;
      for (const AotOp &op : out.ops)
        images += moduleFiles(op.arches[a].bundle).size();
      limits.maxImages = std::max(limits.maxImages, images);
    }
    return runtime::Error::success();
  }

  /// The C symbol array of a build: dims, constants, derived, chunk range.
  static std::vector<std::string> symbolsOf(const AotArchBuild &build) {
    const runtime::KernelBundle &b = build.bundle;
    std::vector<std::string> symbols = b.dims;
    for (const auto &[name, value] : b.constants)
      symbols.push_back(name);
    for (const auto &[name, formula] : build.derived)
      symbols.push_back(name);
    symbols.push_back("chunk_begin");
    symbols.push_back("chunk_end");
    return symbols;
  }

  /// The dim the chunks of per-chunk kernels split: "N", else the first.
  static size_t chunkDim(const runtime::KernelBundle &b) {
    for (size_t i = 0; i < b.dims.size(); ++i)
      if (b.dims[i] == "N")
        return i;
    return 0;
  }

  /// Distinct image files of a bundle, in first-use order.
  static std::vector<std::string> moduleFiles(const runtime::KernelBundle &b) {
    std::vector<std::string> files;
    for (const runtime::BundleKernel &k : b.kernels)
      if (std::find(files.begin(), files.end(), k.file) == files.end())
        files.push_back(k.file);
    return files;
  }

  std::string option(const std::string &key) const {
    const runtime::JsonValue *v = out.options.find(key);
    if (!v)
      return {};
    if (v->isString())
      return v->getString();
    if (v->isInt())
      return std::to_string(v->getInt());
    if (v->isBool())
      return v->getBool() ? "true" : "false";
    return runtime::writeJson(*v, 0);
  }

  std::string variantText() const {
    std::string text = "op=linear_cross_entropy";
    if (out.options.isObject())
      for (const auto &m : out.options.getObject())
        text += " " + m.key + "=" + option(m.key);
    text += " tile=" + out.tile;
    text += " images=" + std::string(imageKindName(out.imageKind));
    text += " lossjit=" + std::string(runtime::kLossjitVersion);
    if (!out.ops.front().arches.front().bundle.llvmVersion.empty())
      text += " llvm=" + out.ops.front().arches.front().bundle.llvmVersion;
    text += " ir_hash=" + out.irHash;
    return text;
  }

  std::string archList() const {
    std::string s;
    for (const AotArchBuild &b : out.ops.front().arches)
      s += (s.empty() ? "" : ",") + b.bundle.arch;
    return s;
  }

  std::string signature(const AotOp &op) const {
    const runtime::KernelBundle &b = op.arches.front().bundle;
    std::vector<std::string> names = cParamNames(op);
    std::string s = p + "status " + p + op.role + "(";
    std::string indent(s.size(), ' ');
    s += p + "handle *handle, CUstream stream";
    for (const std::string &n : names)
      s += ",\n" + indent + "CUdeviceptr " + n;
    s += ",\n" + indent;
    for (size_t i = 0; i < b.dims.size(); ++i)
      s += (i ? ", " : "") + std::string("int64_t ") + b.dims[i];
    s += ",\n" + indent + "CUdeviceptr workspace, size_t workspace_bytes)";
    return s;
  }

  std::string dimList(const AotOp &op, bool withTypes) const {
    std::string s;
    for (const std::string &d : op.arches.front().bundle.dims)
      s += (s.empty() ? "" : ", ") + std::string(withTypes ? "int64_t " : "") + d;
    return s;
  }

  std::string header() const {
    std::ostringstream os;
    std::string guard = P + "H_INCLUDED";
    os << "/* " << out.prefix << ".h - generated by lossjit-aot " << runtime::kLossjitVersion
       << "; do not edit.\n"
       << " *\n"
       << " * Fused linear + cross-entropy kernels for CUDA, usable from C and C++ with\n"
       << " * nothing but the CUDA driver API (include cuda.h, link -lcuda).\n"
       << " *\n"
       << " * Variant: " << commentSafe(variantText()) << "\n"
       << " * Arches:  " << archList() << " (" << imageKindName(out.imageKind)
       << (out.imageKind == ImageKind::Cubin ? ", with PTX fallback" : "") << ")\n"
       << " * Made by: " << commentSafe(out.commandLine) << "\n"
       << " *\n"
       << " * Usage:\n"
       << " *   " << p << "handle *h;\n"
       << " *   if (" << p << "create(ctx, &h) != " << P << "SUCCESS) puts(" << p
       << "last_error());\n"
       << " *   " << p << "forward(h, stream, <device buffers>, " << dimList(out.ops.front(), false)
       << ", 0, 0);   (0, 0: allocate the workspace)\n"
       << " *   " << p << "destroy(h);\n"
       << " */\n"
       << "#ifndef " << guard << "\n#define " << guard << "\n\n"
       << "#include <stddef.h>\n#include <stdint.h>\n\n#include <cuda.h>\n\n"
       << "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n";

    // Variant macros: what a caller can #if on.
    os << "/* The variant these kernels were built for. */\n";
    os << "#define " << P << "LOSSJIT_VERSION " << cString(runtime::kLossjitVersion) << "\n";
    std::string dtype = option("dtype"), labels = option("label_type"),
                reduction = option("reduction"), bias = option("bias"),
                ignore = option("ignore_index");
    if (!dtype.empty())
      os << "#define " << P << "DTYPE " << cString(dtype) << "\n#define " << P << "DTYPE_"
         << upper(sanitize(dtype)) << " 1\n";
    if (!labels.empty())
      os << "#define " << P << "LABEL_TYPE " << cString(labels) << "\n#define " << P
         << "LABEL_" << upper(sanitize(labels)) << " 1\n";
    if (!bias.empty())
      os << "#define " << P << "HAS_BIAS " << (bias == "true" ? 1 : 0) << "\n";
    if (!ignore.empty())
      os << "#define " << P << "IGNORE_INDEX ((int64_t)" << ignore << ")\n";
    if (!reduction.empty())
      os << "#define " << P << "REDUCTION " << cString(reduction) << "\n#define " << P
         << "REDUCTION_" << upper(sanitize(reduction)) << " 1\n";
    static const std::set<std::string> known = {"dtype", "label_type", "bias",
                                                "ignore_index", "reduction", "entry"};
    if (out.options.isObject())
      for (const auto &m : out.options.getObject())
        if (!known.count(m.key))
          os << "#define " << P << "OPTION_" << upper(sanitize(m.key)) << " "
             << cString(option(m.key)) << "\n";
    // Options of the other ops that the variant's options do not say, e.g.
    // LCE_BACKWARD_OPTION_STRATEGY "chunked".
    for (const AotOp &op : out.ops) {
      if (op.role == "forward" || !op.options.isObject())
        continue;
      for (const auto &m : op.options.getObject()) {
        const runtime::JsonValue *common = out.options.find(m.key);
        if (common && *common == m.value)
          continue;
        std::string value = m.value.isString() ? m.value.getString() : runtime::writeJson(m.value, 0);
        os << "#define " << P << upper(op.role) << "_OPTION_" << upper(sanitize(m.key)) << " "
           << cString(value) << "\n";
      }
    }
    os << "#define " << P << "HAS_FORWARD " << (out.findOp("forward") ? 1 : 0) << "\n";
    os << "#define " << P << "HAS_BACKWARD " << (out.findOp("backward") ? 1 : 0) << "\n";
    os << "#define " << P << "ARCHES " << cString(archList()) << "\n";
    os << "#define " << P << "IMAGES " << cString(imageKindName(out.imageKind)) << "\n";
    os << "#define " << P << "WORKSPACE_ALIGNMENT 256\n";

    os << substitute(kHeaderApi, p, P);

    for (const AotOp &op : out.ops) {
      const runtime::KernelBundle &b = op.arches.front().bundle;
      std::vector<std::string> names = cParamNames(op);
      size_t width = 0, shapeWidth = 0;
      for (const std::string &n : names)
        width = std::max(width, n.size());
      for (const runtime::BundleParam &bp : b.params)
        shapeWidth = std::max(shapeWidth, shapeText(bp.shape).size());
      os << "\n/* "
         << (op.role == "forward"            ? "Forward"
             : op.role == "forward_backward" ? "Fused forward+backward (gradients of grad_loss = 1)"
                                             : "Backward")
         << " pass ("
         << op.entry << "). Buffers: dense, row-major device memory in the\n"
         << " * handle's context:\n";
      for (size_t i = 0; i < names.size(); ++i) {
        const runtime::BundleParam &bp = b.params[i];
        os << " *   " << names[i] << std::string(width - names[i].size() + 1, ' ') << bp.dtype
           << std::string(5 - std::min<size_t>(4, bp.dtype.size()), ' ') << shapeText(bp.shape)
           << std::string(shapeWidth - shapeText(bp.shape).size() + 2, ' ')
           << (op.isOutput(bp.name) ? "written" : "read") << "\n";
      }
      os << " * " << dimList(op, false) << " >= 0. workspace: 0 to have the handle's allocator\n"
         << " * provide " << p << op.role << "_workspace_bytes(" << dimList(op, false)
         << ") bytes, or a device buffer of at\n"
         << " * least that many bytes, " << "256-byte aligned, that nothing else uses until\n"
         << " * the kernels finished. Enqueues the kernels on `stream` (in the\n"
         << " * handle's context) and returns without synchronizing. */\n";
      os << signature(op) << ";\n";
      os << "\n/* " << p << op.role << " with the " << names.size()
         << " buffers in an array (in the order above) and dims {" << dimList(op, false)
         << "}:\n * for bindings and generic callers. */\n";
      os << p << "status " << p << op.role << "_v(" << p
         << "handle *handle, CUstream stream,\n"
         << std::string(p.size() + op.role.size() + p.size() + 10, ' ')
         << "const CUdeviceptr *buffers, int num_buffers, const int64_t *dims,\n"
         << std::string(p.size() + op.role.size() + p.size() + 10, ' ')
         << "int num_dims, CUdeviceptr workspace, size_t workspace_bytes);\n";
      os << "\n/* Workspace bytes " << p << op.role << " needs; (size_t)-1 for invalid dims. */\n";
      os << "size_t " << p << op.role << "_workspace_bytes(" << dimList(op, true) << ");\n";
    }
    const AotOp &first = out.ops.front();
    os << "\n/* Workspace bytes enough for every entry point; (size_t)-1 for invalid dims. */\n";
    os << "size_t " << p << "workspace_bytes(" << dimList(first, true) << ");\n";
    os << "\n#ifdef __cplusplus\n} /* extern \"C\" */\n#endif\n\n#endif /* " << guard
       << " */\n";
    return os.str();
  }

  runtime::Expected<std::string> source() const {
    std::ostringstream os;
    os << "/* " << out.prefix << ".c - generated by lossjit-aot " << runtime::kLossjitVersion
       << "; do not edit.\n"
       << " * Build: cc -c " << out.prefix << ".c -I<cuda>/include, link with -lcuda. */\n"
       << "#include \"" << out.prefix << ".h\"\n\n"
       << "#include <stdarg.h>\n#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
       << "#include <string.h>\n\n";
    os << "enum {\n"
       << "  " << P << "I_NUM_OPS = " << out.ops.size() << ",\n"
       << "  " << P << "I_NUM_ARCHES = " << entries.size() << ",\n"
       << "  " << P << "I_MAX_KERNELS = " << limits.maxKernels << ",\n"
       << "  " << P << "I_MAX_WORKSPACES = " << limits.maxWorkspaces << ",\n"
       << "  " << P << "I_MAX_SYMBOLS = " << limits.maxSymbols << ",\n"
       << "  " << P << "I_MAX_PARAMS = " << limits.maxParams << ",\n"
       << "  " << P << "I_MAX_SLOTS = " << limits.maxSlots << ",\n"
       << "  " << P << "I_MAX_IMAGES = " << limits.maxImages << "\n};\n";
    os << substitute(kSourceRuntime, p, P);

    os << "\n/* ------------------------------------------------------------- variant */\n\n";
    os << "static const char " << p << "i_variant[] = " << cString(variantText()) << ";\n";

    // Ops: names, params, dims.
    os << "\n/* ------------------------------------------------------------- ops */\n\n";
    for (size_t o = 0; o < out.ops.size(); ++o) {
      const runtime::KernelBundle &b = out.ops[o].arches.front().bundle;
      os << "static const char *const " << p << "i_param_names_" << o << "[] = {";
      for (size_t i = 0; i < b.params.size(); ++i)
        os << (i ? ", " : "") << cString(b.params[i].name);
      os << "};\n";
      os << "static const char *const " << p << "i_dim_names_" << o << "[] = {";
      for (size_t i = 0; i < b.dims.size(); ++i)
        os << (i ? ", " : "") << cString(b.dims[i]);
      os << "};\n";
    }
    os << "static const " << p << "i_op " << p << "i_ops[" << P << "I_NUM_OPS] = {\n";
    for (size_t o = 0; o < out.ops.size(); ++o) {
      const runtime::KernelBundle &b = out.ops[o].arches.front().bundle;
      os << "  {" << cString(out.ops[o].role) << ", " << b.params.size() << ", " << p
         << "i_param_names_" << o << ", " << b.dims.size() << ", " << p << "i_dim_names_" << o
         << "}" << (o + 1 < out.ops.size() ? "," : "") << "\n";
    }
    os << "};\n";

    // Per (op, arch): kernels, workspaces, constants, sizes.
    os << "\n/* ---------------------------------------------------- plans per arch */\n";
    FormulaCStyle style;
    style.helper = p + "i_";
    style.errorFlag = "e";
    style.symbolArray = "s";
    for (size_t o = 0; o < out.ops.size(); ++o) {
      const AotOp &op = out.ops[o];
      for (const AotArchBuild &build : op.arches) {
        const runtime::KernelBundle &b = build.bundle;
        std::string tag = op.role + "_" + sanitize(b.arch);
        std::vector<std::string> symbols = symbolsOf(build);
        std::vector<std::string> files = moduleFiles(b);
        size_t imageBase = imageOffset(o, build);
        os << "\n/* " << op.role << ", " << b.arch << ": bundle " << b.key << " */\n";
        // Kernel args.
        for (size_t k = 0; k < b.kernels.size(); ++k) {
          const runtime::BundleKernel &kernel = b.kernels[k];
          if (kernel.args.empty())
            continue;
          os << "static const " << p << "i_arg " << p << "i_args_" << tag << "_" << k
             << "[] = {";
          for (size_t a = 0; a < kernel.args.size(); ++a) {
            const std::string &arg = kernel.args[a];
            std::string kind;
            size_t index = 0;
            if (auto i = indexOf(b.params, arg)) {
              kind = P + "I_ARG_PARAM";
              index = *i;
            } else if (auto w = indexOf(b.workspaces, arg)) {
              kind = P + "I_ARG_WORKSPACE";
              index = *w;
            } else {
              auto s = std::find(symbols.begin(), symbols.end(), arg);
              if (s == symbols.end())
                return runtime::makeError("kernel " + kernel.name + ": unknown arg " + arg);
              kind = P + "I_ARG_SYMBOL";
              index = static_cast<size_t>(s - symbols.begin());
            }
            os << (a ? ", " : "") << "{" << kind << ", " << index << "}";
          }
          os << "}; /* ";
          for (size_t a = 0; a < kernel.args.size(); ++a)
            os << (a ? ", " : "") << kernel.args[a];
          os << " */\n";
        }
        os << "static const " << p << "i_kernel " << p << "i_kernels_" << tag << "[] = {\n";
        for (size_t k = 0; k < b.kernels.size(); ++k) {
          const runtime::BundleKernel &kernel = b.kernels[k];
          size_t image = imageBase + static_cast<size_t>(
                                         std::find(files.begin(), files.end(), kernel.file) -
                                         files.begin());
          bool perChunk = k < build.perChunk.size() && build.perChunk[k];
          os << "  {" << cString(kernel.name) << ", " << image << ", {" << kernel.block[0]
             << ", " << kernel.block[1] << ", " << kernel.block[2] << "}, "
             << kernel.sharedBytes << ", " << (perChunk ? 1 : 0) << ", " << kernel.args.size()
             << ", "
             << (kernel.args.empty() ? std::string("NULL")
                                     : p + "i_args_" + tag + "_" + std::to_string(k))
             << "}" << (k + 1 < b.kernels.size() ? "," : "") << "\n";
        }
        os << "};\n";
        if (!b.workspaces.empty()) {
          os << "static const " << p << "i_workspace " << p << "i_workspaces_" << tag
             << "[] = {";
          for (size_t w = 0; w < b.workspaces.size(); ++w) {
            auto size = runtime::dtypeSize(b.workspaces[w].dtype);
            if (!size)
              return size.takeError();
            os << (w ? ", " : "") << "{" << cString(b.workspaces[w].name) << ", " << *size
               << "}";
          }
          os << "};\n";
        }
        if (!b.constants.empty()) {
          os << "static const int64_t " << p << "i_constants_" << tag << "[] = {";
          for (size_t c = 0; c < b.constants.size(); ++c)
            os << (c ? ", " : "") << "INT64_C(" << b.constants[c].second << ")";
          os << "}; /* ";
          for (size_t c = 0; c < b.constants.size(); ++c)
            os << (c ? ", " : "") << b.constants[c].first;
          os << " */\n";
        }
        // Sizes.
        os << "static int " << p << "i_sizes_" << tag
           << "(int64_t *s, int64_t *p, int64_t *w)\n{\n"
           << "  int error = 0;\n  int *e = &error;\n";
        os << "  /* symbols: ";
        for (size_t i = 0; i < symbols.size(); ++i)
          os << (i ? ", " : "") << "s[" << i << "]=" << symbols[i];
        os << " */\n";
        size_t firstDerived = b.dims.size() + b.constants.size();
        for (size_t i = 0; i < build.derived.size(); ++i) {
          // A derived symbol sees only what precedes it.
          std::vector<std::string> visible(symbols.begin(),
                                           symbols.begin() + firstDerived + i);
          auto c = formulaToC(build.derived[i].second, visible, style);
          if (!c)
            return std::move(c.takeError()).withContext("derived " + build.derived[i].first);
          os << "  s[" << firstDerived + i << "] = " << *c << "; /* " << build.derived[i].first
             << " = " << build.derived[i].second << " */\n";
        }
        for (size_t i = 0; i < b.params.size(); ++i) {
          std::string expr = "INT64_C(1)";
          for (const std::string &extent : b.params[i].shape) {
            auto c = formulaToC(extent, symbols, style);
            if (!c)
              return std::move(c.takeError()).withContext("param " + b.params[i].name);
            expr = expr == "INT64_C(1)" ? *c : p + "i_mul(e, " + expr + ", " + *c + ")";
          }
          os << "  p[" << i << "] = " << expr << "; /* " << b.params[i].name << " "
             << shapeText(b.params[i].shape) << " */\n";
        }
        for (size_t w = 0; w < b.workspaces.size(); ++w) {
          auto c = formulaToC(b.workspaces[w].count, symbols, style);
          if (!c)
            return std::move(c.takeError()).withContext("workspace " + b.workspaces[w].name);
          os << "  w[" << w << "] = " << *c << "; /* " << b.workspaces[w].name << ": "
             << b.workspaces[w].count << " */\n";
        }
        if (b.workspaces.empty())
          os << "  (void)w;\n";
        os << "  return error;\n}\n";
        os << "static int " << p << "i_grids_" << tag << "(const int64_t *s, int64_t *g)\n{\n"
           << "  int error = 0;\n  int *e = &error;\n";
        for (size_t k = 0; k < b.kernels.size(); ++k)
          for (int d = 0; d < 3; ++d) {
            auto c = formulaToC(b.kernels[k].grid[d], symbols, style);
            if (!c)
              return std::move(c.takeError()).withContext("kernel " + b.kernels[k].name);
            os << "  g[" << k * 3 + d << "] = " << *c << "; /* " << b.kernels[k].name
               << " grid[" << d << "] = " << b.kernels[k].grid[d] << " */\n";
          }
        os << "  return error;\n}\n";
      }
    }

    // Images.
    os << "\n/* ---------------------------------------------------- kernel images */\n";
    for (const ArchEntry &entry : entries) {
      std::string kind = imageKindName(entry.kind);
      std::string tag = sanitize(entry.arch) + "_" + kind;
      size_t index = 0;
      std::vector<std::string> imageRefs;
      for (size_t o = 0; o < out.ops.size(); ++o) {
        const AotArchBuild &build = out.ops[o].arches[entry.archIndex];
        const runtime::KernelBundle &b = build.bundle;
        for (const std::string &file : moduleFiles(b)) {
          size_t k = 0;
          while (b.kernels[k].file != file)
            ++k;
          bool cubin = entry.kind == ImageKind::Cubin;
          const std::string &bytes = cubin ? b.kernels[k].image : build.ptx[k];
          std::string fileName = cubin ? file : b.kernels[k].name + "." + b.arch + ".ptx";
          std::string var = p + "i_image_" + tag + "_" + std::to_string(index++);
          os << "\n/* " << out.ops[o].role << "/" << fileName << " (" << bytes.size()
             << " bytes) */\n";
          emitBytes(os, var, bytes, !cubin);
          imageRefs.push_back("{" + var + ", " + std::to_string(bytes.size()) + ", " +
                              cString(b.key + "/" + fileName) + "}");
        }
      }
      os << "static const " << p << "i_image " << p << "i_images_" << tag << "[] = {\n";
      for (size_t i = 0; i < imageRefs.size(); ++i)
        os << "  " << imageRefs[i] << (i + 1 < imageRefs.size() ? "," : "") << "\n";
      os << "};\n";
    }

    // The arch table.
    os << "\n/* ---------------------------------------------------- arch table */\n\n";
    os << "static const " << p << "i_arch " << p << "i_arches[" << P << "I_NUM_ARCHES] = {\n";
    for (size_t e = 0; e < entries.size(); ++e) {
      const ArchEntry &entry = entries[e];
      std::string kind = imageKindName(entry.kind);
      std::string tag = sanitize(entry.arch) + "_" + kind;
      size_t images = 0;
      for (const AotOp &op : out.ops)
        images += moduleFiles(op.arches[entry.archIndex].bundle).size();
      os << "  {" << cString(entry.arch + ":" + kind) << ", " << entry.major << ", "
         << entry.minor << ", " << (entry.specific ? 1 : 0) << ", "
         << (entry.kind == ImageKind::Cubin ? 1 : 0) << ", " << images << ", " << p
         << "i_images_" << tag << ",\n   {";
      for (size_t o = 0; o < out.ops.size(); ++o) {
        const AotArchBuild &build = out.ops[o].arches[entry.archIndex];
        const runtime::KernelBundle &b = build.bundle;
        std::string optag = out.ops[o].role + "_" + sanitize(b.arch);
        os << (o ? ",\n    " : "") << "{" << b.kernels.size() << ", " << p << "i_kernels_"
           << optag << ", " << b.workspaces.size() << ", "
           << (b.workspaces.empty() ? std::string("NULL") : p + "i_workspaces_" + optag)
           << ", " << b.constants.size() << ", "
           << (b.constants.empty() ? std::string("NULL") : p + "i_constants_" + optag) << ", "
           << symbolsOf(build).size() - 2 << ", " << chunkSymbolIndex(build) << ", "
           << chunkDim(b) << ", " << p << "i_sizes_" << optag << ", " << p << "i_grids_" << optag
           << "}";
      }
      os << "}}" << (e + 1 < entries.size() ? "," : "") << "\n";
    }
    os << "};\n";

    os << substitute(kSourceEngine, p, P);

    // Entry points.
    os << "\n/* ------------------------------------------------------ entry points */\n";
    for (size_t o = 0; o < out.ops.size(); ++o) {
      const AotOp &op = out.ops[o];
      const runtime::KernelBundle &b = op.arches.front().bundle;
      std::vector<std::string> names = cParamNames(op);
      os << "\n" << signature(op) << "\n{\n";
      os << "  CUdeviceptr params[" << std::max<size_t>(1, names.size()) << "];\n";
      os << "  int64_t dims[" << std::max<size_t>(1, b.dims.size()) << "];\n";
      for (size_t i = 0; i < names.size(); ++i)
        os << "  params[" << i << "] = " << names[i] << ";\n";
      if (names.empty())
        os << "  params[0] = 0;\n";
      for (size_t i = 0; i < b.dims.size(); ++i)
        os << "  dims[" << i << "] = " << b.dims[i] << ";\n";
      if (b.dims.empty())
        os << "  dims[0] = 0;\n";
      os << "  return " << p << "i_run(handle, " << o
         << ", stream, params, dims, workspace, workspace_bytes);\n}\n";
      os << "\n" << p << "status " << p << op.role << "_v(" << p
         << "handle *handle, CUstream stream, const CUdeviceptr *buffers,\n"
         << "    int num_buffers, const int64_t *dims, int num_dims, CUdeviceptr workspace,\n"
         << "    size_t workspace_bytes)\n{\n"
         << "  return " << p << "i_run_v(handle, " << o
         << ", stream, buffers, num_buffers, dims, num_dims, workspace, workspace_bytes);\n}\n";
      os << "\nsize_t " << p << op.role << "_workspace_bytes(" << dimList(op, true) << ")\n{\n";
      os << "  int64_t dims[" << std::max<size_t>(1, b.dims.size()) << "];\n";
      for (size_t i = 0; i < b.dims.size(); ++i)
        os << "  dims[" << i << "] = " << b.dims[i] << ";\n";
      if (b.dims.empty())
        os << "  dims[0] = 0;\n";
      os << "  return " << p << "i_workspace_bytes(" << o << ", dims);\n}\n";
    }
    const AotOp &first = out.ops.front();
    os << "\nsize_t " << p << "workspace_bytes(" << dimList(first, true) << ")\n{\n"
       << "  size_t most = 0, bytes;\n";
    for (const AotOp &op : out.ops) {
      // Ops whose dims differ from the first op's cannot be sized from them.
      if (op.arches.front().bundle.dims != first.arches.front().bundle.dims)
        continue;
      os << "  bytes = " << p << op.role << "_workspace_bytes(" << dimList(first, false)
         << ");\n"
         << "  if (bytes == (size_t)-1) return bytes;\n"
         << "  if (bytes > most) most = bytes;\n";
    }
    os << "  return most;\n}\n";
    return os.str();
  }

  template <typename T>
  static std::optional<size_t> indexOf(const std::vector<T> &list, const std::string &name) {
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].name == name)
        return i;
    return std::nullopt;
  }

  /// Symbol index of the chunk size, or -1.
  static long chunkSymbolIndex(const AotArchBuild &build) {
    if (!build.usesChunks())
      return -1;
    std::vector<std::string> symbols = symbolsOf(build);
    auto it = std::find(symbols.begin(), symbols.end(), build.chunkSymbol);
    return it == symbols.end() ? -1 : static_cast<long>(it - symbols.begin());
  }

  /// Index of op `o`'s first module within its arch entry.
  size_t imageOffset(size_t o, const AotArchBuild &build) const {
    size_t archIndex = 0;
    const AotOp &op = out.ops[o];
    while (&op.arches[archIndex] != &build)
      ++archIndex;
    size_t offset = 0;
    for (size_t i = 0; i < o; ++i)
      offset += moduleFiles(out.ops[i].arches[archIndex].bundle).size();
    return offset;
  }

  const AotOutput &out;
  std::string p, P;
  std::vector<ArchEntry> entries;
  Limits limits;
};

} // namespace

std::vector<std::string> cParamNames(const AotOp &op) {
  std::vector<std::string> names;
  const runtime::KernelBundle &b = op.arches.front().bundle;
  std::set<std::string> taken(b.dims.begin(), b.dims.end());
  for (const runtime::BundleParam &param : b.params) {
    std::string name = param.name;
    while (reservedNames().count(name) || taken.count(name))
      name += "_";
    taken.insert(name);
    names.push_back(name);
  }
  return names;
}

runtime::Expected<CApiFiles> emitCApi(const AotOutput &output) {
  if (runtime::Error e = output.verify())
    return e;
  return Emitter(output).run();
}

} // namespace lossjit::aot

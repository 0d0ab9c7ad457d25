//===- IndexManifest.h - The top-level manifest.json of an AOT output -*- C++ -*-===//
//
// An AOT output directory is a LOSSJIT_KERNEL_PATH root (one bundle directory
// per (op, arch), named by its cache key) plus this index, which a reader
// without the compiler uses to find the bundle it wants by op and arch —
// the cache key itself can only be computed with the compiler.
//
// FORMAT ("format": "lossjit-aot-index", "format_version": 1)
//   format, format_version, lossjit_version, llvm_version,
//   bundle_format, bundle_format_version   the bundles' own format
//   command                                 how lossjit-aot was run
//   op                                      "linear_cross_entropy"
//   options {dtype, label_type, bias, ignore_index, reduction, ...}
//   tile {...}, ir_hash, images ("ptx" | "cubin")
//   c_api {prefix, header, source, functions {forward: "<p>_forward", ...},
//          workspace_alignment}             absent with --no-c-api
//   ops: [ {role: "forward"|"backward", entry, c_function, options {...},
//           params: [{name, c_name, dtype, shape, output, element_bytes}],
//           dims: ["N","V","D"],
//           arches: [ {arch, key, dir, images, compile_ms, constants {..},
//                      derived: [{name, formula}], chunk ("" = none),
//                      workspaces: [{name, dtype, count, element_bytes}],
//                      kernels: [ {name, entry, file, ptx_file, sha256, bytes,
//                                  grid[3] (formulas), block[3], shared_bytes,
//                                  args, per_chunk, cluster (blocks per
//                                  cluster, 1: none), persistent (may launch
//                                  fewer whole clusters along x, e.g. the
//                                  co-resident ones), parameter_count,
//                                  signature: [{arg, kind, slots: [field...],
//                                               ptx_types: [...]}]} ] } ] } ]
//
//===----------------------------------------------------------------------===//

#ifndef LOSSJIT_TOOLS_AOT_INDEXMANIFEST_H
#define LOSSJIT_TOOLS_AOT_INDEXMANIFEST_H

#include "tools/lossjit-aot/AotModel.h"

namespace lossjit::aot {

inline constexpr const char *kIndexFormat = "lossjit-aot-index";
inline constexpr int64_t kIndexFormatVersion = 1;

/// The index for `output` (which must verify()); `withCApi` adds c_api.
runtime::Expected<runtime::JsonValue> buildIndexManifest(const AotOutput &output,
                                                         bool withCApi = true);

/// Checks an index read back from disk against the schema above and the
/// bundle directories next to it (every listed bundle loads and matches its
/// key, arch and kernel hashes). Used by tests and `lossjit-aot --check DIR`.
runtime::Error checkAotDirectory(const std::string &directory);

} // namespace lossjit::aot

#endif // LOSSJIT_TOOLS_AOT_INDEXMANIFEST_H

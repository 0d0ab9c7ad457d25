//===- Version.h - Version strings baked into cache keys --------*- C++ -*-===//

#ifndef LOSSJIT_RUNTIME_VERSION_H
#define LOSSJIT_RUNTIME_VERSION_H

namespace lossjit::runtime {

#ifdef LOSSJIT_VERSION
/// The lossjit version; part of every cache key and manifest.
inline constexpr const char *kLossjitVersion = LOSSJIT_VERSION;
#else
inline constexpr const char *kLossjitVersion = "0.1.0";
#endif

} // namespace lossjit::runtime

#endif // LOSSJIT_RUNTIME_VERSION_H

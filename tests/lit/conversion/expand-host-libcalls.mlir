// loss-expand-host-libcalls: f16/bf16 ↔ f32 conversions and f32/f64
// exp2/log2 become integer and float arithmetic (+ math.fma), scalar or
// vector, so the host JIT never emits __truncsfbf2/__extendhfsf2/
// __truncsfhf2/exp2f/log2f/exp2/log2. Other types keep their op.
// RUN: lossjit-opt %s --loss-expand-host-libcalls --split-input-file | FileCheck %s
// It runs nested in the CPU pipeline's kernel module.
// RUN: lossjit-opt %s --pass-pipeline="builtin.module(builtin.module(loss-expand-host-libcalls))" \
// RUN:   --split-input-file | FileCheck %s --check-prefix=NESTED

// bf16 → f32 is the high half of the f32 bits.
// CHECK-LABEL: func.func @extend_bf16
// CHECK-SAME:    (%[[A:.*]]: bf16)
// CHECK:         %[[B:.*]] = arith.bitcast %[[A]] : bf16 to i16
// CHECK-NEXT:    %[[W:.*]] = arith.extui %[[B]] : i16 to i32
// CHECK-NEXT:    %[[S:.*]] = arith.shli %[[W]], %{{.*}} : i32
// CHECK-NEXT:    %[[F:.*]] = arith.bitcast %[[S]] : i32 to f32
// CHECK-NEXT:    return %[[F]] : f32
func.func @extend_bf16(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}

// -----

// f32 → bf16: bias 0x7FFF + lsb (32767), NaN → 0x7FC0 (32704), vector shape kept.
// CHECK-LABEL: func.func @truncate_bf16_vector
// CHECK-DAG:     %[[NAN:.*]] = arith.constant dense<32704> : vector<8xi32>
// CHECK-DAG:     %[[BIAS:.*]] = arith.constant dense<32767> : vector<8xi32>
// CHECK:         %[[U:.*]] = arith.bitcast %{{.*}} : vector<8xf32> to vector<8xi32>
// CHECK:         arith.addi %{{.*}}, %[[BIAS]] : vector<8xi32>
// CHECK:         %[[ISNAN:.*]] = arith.cmpf uno
// CHECK:         %[[SEL:.*]] = arith.select %[[ISNAN]], %[[NAN]], %{{.*}} : vector<8xi1>, vector<8xi32>
// CHECK:         %[[T:.*]] = arith.trunci %[[SEL]] : vector<8xi32> to vector<8xi16>
// CHECK:         arith.bitcast %[[T]] : vector<8xi16> to vector<8xbf16>
// CHECK-NOT:     arith.truncf
func.func @truncate_bf16_vector(%a: vector<8xf32>) -> vector<8xbf16> {
  %r = arith.truncf %a : vector<8xf32> to vector<8xbf16>
  return %r : vector<8xbf16>
}

// -----

// f16 → f32: normal (rebias by 112 << 23), inf/NaN (quiet bit 0x400000),
// subnormal (mantissa · 2^-24) chosen by the exponent field.
// CHECK-LABEL: func.func @extend_f16_vector
// CHECK-DAG:     arith.constant dense<939524096> : vector<4xi32>
// CHECK-DAG:     arith.constant dense<4194304> : vector<4xi32>
// CHECK-DAG:     arith.constant dense<5.96046448E-8> : vector<4xf32>
// CHECK:         arith.extui %{{.*}} : vector<4xi16> to vector<4xi32>
// CHECK:         arith.sitofp %{{.*}} : vector<4xi32> to vector<4xf32>
// CHECK:         arith.select
// CHECK:         arith.select
// CHECK:         arith.bitcast %{{.*}} : vector<4xi32> to vector<4xf32>
// CHECK-NOT:     arith.extf
func.func @extend_f16_vector(%a: vector<4xf16>) -> vector<4xf32> {
  %r = arith.extf %a : vector<4xf16> to vector<4xf32>
  return %r : vector<4xf32>
}

// -----

// f32 → f16: overflow threshold (143 << 23), subnormal threshold
// (113 << 23) with the 0.5 aligner, rounding rebias 0xC8000FFF.
// CHECK-LABEL: func.func @truncate_f16
// CHECK-DAG:     arith.constant 1199570944 : i32
// CHECK-DAG:     arith.constant 947912704 : i32
// CHECK-DAG:     arith.constant 5.000000e-01 : f32
// CHECK-DAG:     arith.constant -939520001 : i32
// CHECK-DAG:     arith.constant 32256 : i32
// CHECK:         arith.trunci %{{.*}} : i32 to i16
// CHECK:         arith.bitcast %{{.*}} : i16 to f16
// CHECK-NOT:     arith.truncf
func.func @truncate_f16(%a: f32) -> f16 {
  %r = arith.truncf %a : f32 to f16
  return %r : f16
}

// -----

// exp2: clamp, 1.5·2^23 shifter, six fma (degree-6 polynomial), two
// power-of-two multiplies, NaN passthrough.
// CHECK-LABEL: func.func @exp2_f32
// CHECK-SAME:    (%[[X:.*]]: f32)
// CHECK-DAG:     arith.constant 0x4B400000 : f32
// CHECK-DAG:     arith.constant -1.510000e+02 : f32
// CHECK-DAG:     arith.constant 1.290000e+02 : f32
// CHECK-COUNT-6: math.fma
// CHECK:         arith.fptosi %{{.*}} : f32 to i32
// CHECK:         arith.mulf
// CHECK-NEXT:    %[[R:.*]] = arith.mulf
// CHECK-NEXT:    %[[N:.*]] = arith.cmpf uno, %[[X]], %[[X]] : f32
// CHECK-NEXT:    %[[OUT:.*]] = arith.select %[[N]], %[[X]], %[[R]] : f32
// CHECK-NEXT:    return %[[OUT]]
// CHECK-NOT:     math.exp2
func.func @exp2_f32(%a: f32) -> f32 {
  %r = math.exp2 %a : f32
  return %r : f32
}

// -----

// log2: subnormal prescale by 2^23, split at √2 (0x3FB504F3 = 1068827891),
// degree-9 polynomial (8 Horner fma + 2 for the split log2(e)), specials.
// CHECK-LABEL: func.func @log2_vector
// CHECK-DAG:     arith.constant dense<1068827891> : vector<8xi32>
// CHECK-DAG:     arith.constant dense<1.44269502> : vector<8xf32>
// CHECK-DAG:     arith.constant dense<1.92596303E-8> : vector<8xf32>
// CHECK-DAG:     arith.constant dense<0xFF800000> : vector<8xf32>
// CHECK-DAG:     arith.constant dense<0x7FC00000> : vector<8xf32>
// CHECK-COUNT-10: math.fma
// CHECK:         arith.sitofp
// CHECK-NOT:     math.log2
func.func @log2_vector(%a: vector<8xf32>) -> vector<8xf32> {
  %r = math.log2 %a : vector<8xf32>
  return %r : vector<8xf32>
}

// -----

// f64 exp2: clamp to [-1076, 1025], the 1.5·2^52 shifter, the degree-13
// Taylor series of 2^f (13 Horner fma), 2^n in two steps on the i64 bits.
// CHECK-LABEL: func.func @exp2_f64
// CHECK-DAG:     arith.constant -1.076000e+03 : f64
// CHECK-DAG:     arith.constant 0x4338000000000000 : f64
// CHECK-DAG:     arith.constant 1023 : i64
// CHECK-COUNT-13: math.fma
// CHECK:         arith.fptosi %{{.*}} : f64 to i64
// CHECK:         arith.shli %{{.*}} : i64
// CHECK-NOT:     math.exp2
func.func @exp2_f64(%a: f64) -> f64 {
  %r = math.exp2 %a : f64
  return %r : f64
}

// -----

// f64 log2: subnormal prescale by 2^52, split at √2 (0x3FF6A09E667F3BCD),
// s = (m − 1)/(m + 1), the odd series of atanh in s² (11 Horner fma).
// CHECK-LABEL: func.func @log2_f64_vector
// CHECK-DAG:     arith.constant dense<4609047870845172685> : vector<4xi64>
// CHECK-DAG:     arith.constant dense<2.8853900817779268> : vector<4xf64>
// CHECK:         arith.divf %{{.*}} : vector<4xf64>
// CHECK-COUNT-11: math.fma
// CHECK:         arith.sitofp %{{.*}} : vector<4xi64> to vector<4xf64>
// CHECK-NOT:     math.log2
func.func @log2_f64_vector(%a: vector<4xf64>) -> vector<4xf64> {
  %r = math.log2 %a : vector<4xf64>
  return %r : vector<4xf64>
}

// -----

// Negative: other types and rounding modes keep their op.
// CHECK-LABEL: func.func @untouched
// CHECK:         math.exp2 %{{.*}} : f16
// CHECK:         arith.truncf %{{.*}} : f64 to f32
// CHECK:         arith.extf %{{.*}} : f16 to f64
// CHECK:         arith.extf %{{.*}} : f32 to f64
// CHECK:         arith.truncf %{{.*}} downward : f32 to bf16
// NESTED-LABEL: func.func @untouched
// NESTED:         math.exp2 %{{.*}} : f16
func.func @untouched(%a: f64, %h: f16, %s: f32) -> (f16, f32, f64, f64, bf16) {
  %0 = math.exp2 %h : f16
  %2 = arith.truncf %a : f64 to f32
  %3 = arith.extf %h : f16 to f64
  %4 = arith.extf %s : f32 to f64
  %5 = arith.truncf %s downward : f32 to bf16
  return %0, %2, %3, %4, %5 : f16, f32, f64, f64, bf16
}

// -----

// NESTED-LABEL: module @kernels
// NESTED:         func.func @inner
// NESTED-NOT:     arith.extf
// NESTED:         arith.shli
module {
  module @kernels {
    func.func @inner(%a: bf16) -> f32 {
      %r = arith.extf %a : bf16 to f32
      return %r : f32
    }
  }
}

// -----

// f16-extend-in-hardware (targets with F16C): f16 → f32 widening stays for
// LLVM's exact instruction; bf16 widening and every narrowing still expand.
// RUN: lossjit-opt %s --loss-expand-host-libcalls=f16-extend-in-hardware=true --split-input-file \
// RUN:   | FileCheck %s --check-prefix=F16C
// F16C-LABEL: func.func @widen_with_f16c
// F16C:         arith.extf %{{.*}} : vector<8xf16> to vector<8xf32>
// F16C-NOT:     arith.extf
// F16C-NOT:     arith.truncf
// F16C:         return
func.func @widen_with_f16c(%h: vector<8xf16>, %b: vector<8xbf16>, %x: vector<8xf32>)
    -> (vector<8xf32>, vector<8xf32>, vector<8xf16>) {
  %0 = arith.extf %h : vector<8xf16> to vector<8xf32>
  %1 = arith.extf %b : vector<8xbf16> to vector<8xf32>
  %2 = arith.truncf %x : vector<8xf32> to vector<8xf16>
  return %0, %1, %2 : vector<8xf32>, vector<8xf32>, vector<8xf16>
}

// -----

// expand-f32-fma (a CPU without FMA units): f32 fma is exact f64
// arithmetic — the product (exact), the sum, its two-sum error, the sum
// rounded to odd by its bits, then one rounding to f32. Only the input's
// fmas: those of the exp2 polynomial the pass writes stay math.fma (calls
// to the exact fmaf). f64 fma stays (for LLVM's call to the exact fma);
// without the option f32 fma stays too.
// RUN: lossjit-opt %s --loss-expand-host-libcalls=expand-f32-fma=true --split-input-file \
// RUN:   | FileCheck %s --check-prefix=FMA
// FMA-LABEL: func.func @fma_without_fma_units
// FMA-SAME:    (%[[A:.*]]: vector<8xf32>, %[[B:.*]]: vector<8xf32>, %[[C:.*]]: vector<8xf32>, %[[X:.*]]: f32, %[[D:.*]]: f64)
// FMA-DAG:     %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : vector<8xf64>
// FMA:         %[[WA:.*]] = arith.extf %[[A]] : vector<8xf32> to vector<8xf64>
// FMA-NEXT:    %[[WB:.*]] = arith.extf %[[B]] : vector<8xf32> to vector<8xf64>
// FMA-NEXT:    %[[WC:.*]] = arith.extf %[[C]] : vector<8xf32> to vector<8xf64>
// FMA-NEXT:    %[[P:.*]] = arith.mulf %[[WA]], %[[WB]] : vector<8xf64>
// FMA-NEXT:    %[[S:.*]] = arith.addf %[[P]], %[[WC]] : vector<8xf64>
// FMA-NEXT:    %[[CP:.*]] = arith.subf %[[S]], %[[P]] : vector<8xf64>
// FMA-NEXT:    %[[PP:.*]] = arith.subf %[[S]], %[[CP]] : vector<8xf64>
// FMA-NEXT:    %[[PE:.*]] = arith.subf %[[P]], %[[PP]] : vector<8xf64>
// FMA-NEXT:    %[[CE:.*]] = arith.subf %[[WC]], %[[CP]] : vector<8xf64>
// FMA-NEXT:    %[[E:.*]] = arith.addf %[[PE]], %[[CE]] : vector<8xf64>
// FMA-NEXT:    %[[BITS:.*]] = arith.bitcast %[[S]] : vector<8xf64> to vector<8xi64>
// FMA-NEXT:    %[[INEXACT:.*]] = arith.cmpf one, %[[E]], %[[ZERO]] : vector<8xf64>
// FMA:         %[[ODD:.*]] = arith.select %{{.*}}, %{{.*}}, %[[BITS]] : vector<8xi1>, vector<8xi64>
// FMA-NEXT:    %[[OF:.*]] = arith.bitcast %[[ODD]] : vector<8xi64> to vector<8xf64>
// FMA-NEXT:    %[[R:.*]] = arith.truncf %[[OF]] : vector<8xf64> to vector<8xf32>
// FMA:         arith.extf %[[X]] : f32 to f64
// FMA:         %[[RX:.*]] = arith.truncf %{{.*}} : f64 to f32
// FMA-NOT:     math.fma %{{.*}} : vector<8xf32>
// FMA:         %[[F64:.*]] = math.fma %[[D]], %[[D]], %[[D]] : f64
// FMA:         math.fma %{{.*}} : f32
// FMA:         return %[[R]], %[[RX]], %[[F64]], %{{.*}}
// The pass without the option leaves f32 fma alone.
// CHECK-LABEL: func.func @fma_without_fma_units
// CHECK:         math.fma %{{.*}} : vector<8xf32>
// CHECK:         math.fma %{{.*}} : f32
// CHECK:         math.fma %{{.*}} : f64
func.func @fma_without_fma_units(%a: vector<8xf32>, %b: vector<8xf32>, %c: vector<8xf32>,
                                 %x: f32, %d: f64) -> (vector<8xf32>, f32, f64, f32) {
  %0 = math.fma %a, %b, %c : vector<8xf32>
  %1 = math.fma %x, %x, %x : f32
  %2 = math.fma %d, %d, %d : f64
  %3 = math.exp2 %x : f32
  return %0, %1, %2, %3 : vector<8xf32>, f32, f64, f32
}

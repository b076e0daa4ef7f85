// Closes what isa_begin.h opened.
#ifdef SINEW_LINALG_AVX512
#pragma GCC pop_options
#endif
#undef SINEW_LINALG_ISA
#undef SINEW_LINALG_TARGET
#pragma GCC diagnostic pop

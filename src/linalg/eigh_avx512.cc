// The AVX-512 copy of eigh.
#define SINEW_LINALG_AVX512
#include "linalg/eigh_isa.h"

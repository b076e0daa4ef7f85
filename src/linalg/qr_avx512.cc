// The AVX-512 copy of QR and least squares.
#define SINEW_LINALG_AVX512
#include "linalg/qr_isa.h"

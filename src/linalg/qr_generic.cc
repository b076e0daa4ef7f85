// The portable copy of QR and least squares.
#include "linalg/qr_isa.h"

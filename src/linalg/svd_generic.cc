// The portable copy of the SVD.
#include "linalg/svd_isa.h"

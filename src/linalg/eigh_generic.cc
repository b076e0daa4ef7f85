// The portable copy of eigh.
#include "linalg/eigh_isa.h"

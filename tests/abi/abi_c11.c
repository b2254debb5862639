/* Every public header compiled as strict C11 (-std=c11 -pedantic -Werror): the ABI stays C.
 * Reports sizeof of each public struct as the C compiler sees it. */
#include "abi_structs.h"
#include "loom/loom.h"

#define LOOM_ABI_SIZEOF(T) sizeof(T),
const size_t loom_abi_c11_sizes[] = {LOOM_ABI_STRUCTS(LOOM_ABI_SIZEOF)};
const size_t loom_abi_c11_count = sizeof(loom_abi_c11_sizes) / sizeof(loom_abi_c11_sizes[0]);

/* The inline helpers are usable from C. */
size_t loom_abi_c11_f32_bytes(void) { return loom_dtype_bytes(loom_f32()); }

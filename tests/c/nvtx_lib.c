/* A shared library with its own embedded copy of NVTX (nvtx3 keeps its state hidden per shared object), so it
 * calls InitializeInjectionNvtx2 separately from the program that loads it. */
#include <nvtx3/nvToolsExt.h>

void lib_work(void) {
    nvtxRangePushA("from-lib");
    nvtxMarkA("lib-mark");
    nvtxRangePop();
}

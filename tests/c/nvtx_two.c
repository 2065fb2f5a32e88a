/* The program half of the two-library NVTX test: both this program and libnvtx_lib.so must be recorded. */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>

void lib_work(void);

int main(void) {
    for (int i = 0; i < 3; i++) {
        nvtxRangePushA("from-main");
        lib_work();
        nvtxRangePop();
    }
    printf("nvtx_two: ok\n");
    return 0;
}

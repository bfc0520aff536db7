// The CUDA tests' main: float32 GEMMs and convolutions run without TF32 unless the caller says otherwise, so that
// results compare with the CPU's at float32 tolerances.
#include <cstdlib>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
    setenv("TESSERA_CUDA_USE_TF32", "0", 0);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}

# CUDA backend tests: parity against the CPU reference backend (ops) and the whole
# model on the tiny random gpt-oss files of tests/model/tiny_model.h.
set(BRASS_TEST_DEPS brass_model brass_backend brass_gguf brass_quant)

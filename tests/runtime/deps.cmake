# engine tests build tiny random models with tests/model/tiny_model.h (gguf writer + quant).
set(BRASS_TEST_DEPS brass_model brass_gguf brass_quant)

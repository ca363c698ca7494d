set(BRASS_TEST_DEPS brass_quant)

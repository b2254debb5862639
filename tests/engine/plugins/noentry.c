/* A shared object that is not a Loom plugin: it lacks loom_plugin_entry. */
int loom_test_not_a_plugin(void) { return 42; }

package main

import "os"

// environ is the environment configuration overrides are read from.
func environ() []string { return os.Environ() }

// Package selftest tests the conformance suite itself: its tests run storagetest.Run against a small
// in-package reference store, which must pass, and against mutants of it, each carrying one small,
// plausible bug of the kind real backends have had (a positional resume, a prefix treated as a
// pattern, a batch written row by row, a key collation that folds case, a drop that releases its lock
// between rows, …). Every mutant must make the suite fail; a mutant that passes names a check the
// suite lacks.
//
// Each mutant runs in a subprocess (the test binary re-executed with STRATA_MUTANT set), so that a
// failure or a hang of the suite on it is observed from outside instead of failing this package's
// own run. The package holds no code outside its tests.
package selftest

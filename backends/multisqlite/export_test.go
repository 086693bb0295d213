package multisqlite

// What the external test package's harness needs of the package's insides.

// Poison is the harness's Poison (poison).
var Poison = poison

// RawWalk is the harness's RawWalk (rawWalk).
var RawWalk = rawWalk

// Package repocheck holds tests of the repository itself, not of any
// package: every citation of docs/rabbitmq-semantics.md resolves to a
// section of it, and no committed file names a path outside the
// repository. It has no code.
package repocheck

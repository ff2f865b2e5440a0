// Package arch holds no code; its tests enforce the package layering of
// DESIGN.md and the purity of the protocol core.
package arch

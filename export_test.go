package weir

// RunMain is Main's command line on args, for tests.
var RunMain = runMain

// RaceEnabled: the tests run under the race detector.
const RaceEnabled = raceEnabled

// DefaultLocalDir is where local copies live without LocalRecoveryDir.
var DefaultLocalDir = defaultLocalDir

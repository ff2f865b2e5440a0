package weir

// RunMain is Main's command line on args, for tests.
var RunMain = runMain

package kind

// NodeCount is nodeCount, for the tests of package kind_test.
var NodeCount = nodeCount

// WaitInotify is waitInotify, for the tests of package kind_test.
var WaitInotify = waitInotify

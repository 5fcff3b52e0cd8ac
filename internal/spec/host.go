package spec

// CheckHost checks a host name as a route's host is checked (a domain
// assigned to a namespace, for instance). It returns "" when h is valid.
func CheckHost(h string) string { return hostProblem(h, false) }

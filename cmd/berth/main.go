// Command berth is the berth gateway and its command-line client.
package main

func main() {}

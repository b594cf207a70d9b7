module github.com/mroce/mroce

go 1.26

// The format check's control: this file is not in .clang-format's layout (ctest
// Style.UnformattedFileIsCaught); the check of the tree leaves tests/style out.
int  badly_laid_out( int x ){return x+1;}

# cmake -DIN=file -DOUT=file.inc -P embed_text.cmake: the file as a C++ raw string literal, for
# #include inside an initialiser (src/explore/page.html -> explore_page_html.inc).
file(READ ${IN} content)
string(FIND "${content}" ")qkvpage\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw string's delimiter )qkvpage\"")
endif()
file(WRITE ${OUT}.tmp "R\"qkvpage(${content})qkvpage\"\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)

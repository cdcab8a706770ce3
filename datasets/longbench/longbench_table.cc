// The 21 LongBench v1 datasets, written from the official config files (THUDM/LongBench,
// LongBench/config/ at 2e00731): the prompt strings are byte for byte those of dataset2prompt.json
// (typos such as "asconcisely" and trailing spaces included), max_new_tokens is
// dataset2maxlen.json, the metric is eval.py's dataset2metric, the chat-template skip list is
// pred.py's, the category is the README's. tests/datasets/longbench_test.cc compares every string
// and limit with the JSON files.
#include "datasets/longbench/longbench_table.h"

namespace kvb {

const LongBenchDataset kLongBenchDatasets[kLongBenchDatasetCount] = {
    {"narrativeqa", "Single-Doc QA", "en", "qa_f1", 128, true, false,
     "You are given a story, which can be either a novel or a movie script, and a question. Answer "
     "the question asconcisely as you can, using a single phrase if possible. Do not provide any "
     "explanation.\n"
     "\n"
     "Story: {context}\n"
     "\n"
     "Now, answer the question based on the story asconcisely as you can, using a single phrase if "
     "possible. Do not provide any explanation.\n"
     "\n"
     "Question: {input}\n"
     "\n"
     "Answer:"},
    {"qasper", "Single-Doc QA", "en", "qa_f1", 128, true, false,
     "You are given a scientific article and a question. Answer the question as concisely as you "
     "can, using a single phrase or sentence if possible. If the question cannot be answered based "
     "on the information in the article, write \"unanswerable\". If the question is a yes/no "
     "question, answer \"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n"
     "\n"
     "Article: {context}\n"
     "\n"
     " Answer the question based on the above article as concisely as you can, using a single "
     "phrase or sentence if possible. If the question cannot be answered based on the information "
     "in the article, write \"unanswerable\". If the question is a yes/no question, answer "
     "\"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n"
     "\n"
     "Question: {input}\n"
     "\n"
     "Answer:"},
    {"multifieldqa_en", "Single-Doc QA", "en", "qa_f1", 64, true, false,
     "Read the following text and answer briefly.\n"
     "\n"
     "{context}\n"
     "\n"
     "Now, answer the following question based on the above text, only give me the answer and do "
     "not output any other words.\n"
     "\n"
     "Question: {input}\n"
     "Answer:"},
    {"multifieldqa_zh", "Single-Doc QA", "zh", "qa_f1_zh", 64, true, false,
     "阅读以下文字并用中文简短回答：\n"
     "\n"
     "{context}\n"
     "\n"
     "现在请基于上面的文章回答下面的问题，只告诉我答案，不要输出任何其他字词。\n"
     "\n"
     "问题：{input}\n"
     "回答："},
    {"hotpotqa", "Multi-Doc QA", "en", "qa_f1", 32, true, false,
     "Answer the question based on the given passages. Only give me the answer and do not output "
     "any other words.\n"
     "\n"
     "The following are given passages.\n"
     "{context}\n"
     "\n"
     "Answer the question based on the given passages. Only give me the answer and do not output "
     "any other words.\n"
     "\n"
     "Question: {input}\n"
     "Answer:"},
    {"2wikimqa", "Multi-Doc QA", "en", "qa_f1", 32, true, false,
     "Answer the question based on the given passages. Only give me the answer and do not output "
     "any other words.\n"
     "\n"
     "The following are given passages.\n"
     "{context}\n"
     "\n"
     "Answer the question based on the given passages. Only give me the answer and do not output "
     "any other words.\n"
     "\n"
     "Question: {input}\n"
     "Answer:"},
    {"musique", "Multi-Doc QA", "en", "qa_f1", 32, true, false,
     "Answer the question based on the given passages. Only give me the answer and do not output "
     "any other words.\n"
     "\n"
     "The following are given passages.\n"
     "{context}\n"
     "\n"
     "Answer the question based on the given passages. Only give me the answer and do not output "
     "any other words.\n"
     "\n"
     "Question: {input}\n"
     "Answer:"},
    {"dureader", "Multi-Doc QA", "zh", "rouge_zh", 128, true, false,
     "请基于给定的文章回答下述问题。\n"
     "\n"
     "文章：{context}\n"
     "\n"
     "请基于上述文章回答下面的问题。\n"
     "\n"
     "问题：{input}\n"
     "回答："},
    {"gov_report", "Summarization", "en", "rouge", 512, true, false,
     "You are given a report by a government agency. Write a one-page summary of the report.\n"
     "\n"
     "Report:\n"
     "{context}\n"
     "\n"
     "Now, write a one-page summary of the report.\n"
     "\n"
     "Summary:"},
    {"qmsum", "Summarization", "en", "rouge", 512, true, false,
     "You are given a meeting transcript and a query containing a question or instruction. Answer "
     "the query in one or more sentences.\n"
     "\n"
     "Transcript:\n"
     "{context}\n"
     "\n"
     "Now, answer the query based on the above meeting transcript in one or more sentences.\n"
     "\n"
     "Query: {input}\n"
     "Answer:"},
    {"multi_news", "Summarization", "en", "rouge", 512, true, false,
     "You are given several news passages. Write a one-page summary of all news. \n"
     "\n"
     "News:\n"
     "{context}\n"
     "\n"
     "Now, write a one-page summary of all the news.\n"
     "\n"
     "Summary:"},
    {"vcsum", "Summarization", "zh", "rouge_zh", 512, true, false,
     "下面有一段会议记录，请你阅读后，写一段总结，总结会议的内容。\n"
     "会议记录：\n"
     "{context}\n"
     "\n"
     "会议总结："},
    {"trec", "Few-shot", "en", "classification", 64, false, true,
     "Please determine the type of the question below. Here are some examples of questions.\n"
     "\n"
     "{context}\n"
     "{input}"},
    {"triviaqa", "Few-shot", "en", "qa_f1", 32, false, true,
     "Answer the question based on the given passage. Only give me the answer and do not output "
     "any other words. The following are some examples.\n"
     "\n"
     "{context}\n"
     "\n"
     "{input}"},
    {"samsum", "Few-shot", "en", "rouge", 128, false, true,
     "Summarize the dialogue into a few short sentences. The following are some examples.\n"
     "\n"
     "{context}\n"
     "\n"
     "{input}"},
    {"lsht", "Few-shot", "zh", "classification", 64, false, true,
     "请判断给定新闻的类别，下面是一些例子。\n"
     "\n"
     "{context}\n"
     "{input}"},
    {"passage_count", "Synthetic", "en", "count", 32, true, false,
     "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. "
     "Please carefully read these paragraphs and determine how many unique paragraphs there are "
     "after removing duplicates. In other words, how many non-repeating paragraphs are there in "
     "total?\n"
     "\n"
     "{context}\n"
     "\n"
     "Please enter the final count of unique paragraphs after removing duplicates. The output "
     "format should only contain the number, such as 1, 2, 3, and so on.\n"
     "\n"
     "The final answer is: "},
    {"passage_retrieval_en", "Synthetic", "en", "retrieval", 32, true, false,
     "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which "
     "paragraph the abstract is from.\n"
     "\n"
     "{context}\n"
     "\n"
     "The following is an abstract.\n"
     "\n"
     "{input}\n"
     "\n"
     "Please enter the number of the paragraph that the abstract is from. The answer format must "
     "be like \"Paragraph 1\", \"Paragraph 2\", etc.\n"
     "\n"
     "The answer is: "},
    {"passage_retrieval_zh", "Synthetic", "zh", "retrieval_zh", 32, true, false,
     "以下是若干段落文字，以及其中一个段落的摘要。请确定给定的摘要出自哪一段。\n"
     "\n"
     "{context}\n"
     "\n"
     "下面是一个摘要\n"
     "\n"
     "{input}\n"
     "\n"
     "请输入摘要所属段落的编号。答案格式必须是\"段落1\"，\"段落2\"等格式\n"
     "\n"
     "答案是："},
    {"lcc", "Code", "code", "code_sim", 64, false, false,
     "Please complete the code given below. \n"
     "{context}Next line of code:\n"},
    {"repobench-p", "Code", "code", "code_sim", 64, false, false,
     "Please complete the code given below. \n"
     "{context}{input}Next line of code:\n"},
};

}  // namespace kvb
